"""recon's phase retrieval (--phase), ring removal (--stripes all/wavelet-fft and
their parameters) and half-acquisition (--half-acquisition) flags: disk to disk
equal to the in-memory preprocess functions and fbp, the config file keys, the
dry run's plan, and one-line errors (exit 2) naming the flag."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.cli import main
from leveret.io import read_array
from leveret.preprocess import (
    half_acquisition,
    normalize,
    remove_stripes,
    retrieve_phase,
)

PHASE = {"energy": 20.0, "distance": 0.3, "pixel_size": 4e-6, "delta_beta": 100.0}
PHASE_FLAGS = [
    "--phase",
    "paganin",
    "--energy",
    "20",
    "--distance",
    "0.3",
    "--pixel-size",
    "4e-6",
    "--delta-beta",
    "100",
]
AXIS = 47.3


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Raw counts with flats and darks (180 degrees), and an offset-axis 360-degree scan."""
    folder = tmp_path_factory.mktemp("pre")
    rng = np.random.default_rng(7)
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 90, endpoint=False), 64, n_rows=48)
    mu_t = 0.01 * phantom.shepp_logan_3d(radius=28.0).project(g)
    flat = (1000 * (1 + 0.02 * rng.random((48, 64)))).astype(np.float32)
    dark = (10 + rng.random((48, 64))).astype(np.float32)
    raw = (dark + flat * np.exp(-mu_t)).astype(np.float32)
    for name, a in (("raw", raw), ("flat", flat), ("dark", dark)):
        np.save(folder / f"{name}.npy", a)
    angles = np.linspace(0, 2 * np.pi, 360, endpoint=False)
    offset = leveret.ParallelGeometry(angles, 56, n_rows=12, center=AXIS)
    half = (0.01 * phantom.shepp_logan_3d(radius=40.0).project(offset)).astype(np.float32)
    np.save(folder / "half.npy", half)
    return folder, g, raw, flat, dark, half


def recon(folder, source, name, *flags):
    rc = main(
        [
            "recon",
            str(folder / source),
            str(folder / name),
            "--backend",
            "cpu",
            "--no-progress",
            "--overwrite",
            "-q",
            *flags,
        ]
    )
    return rc, (read_array(folder / name) if rc == 0 else None)


def raw_flags(folder):
    return ["--angles", "0:180:90", "--flat", str(folder / "flat.npy"), "--dark", str(folder / "dark.npy")]


def max_rel(a, b):
    return float(np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max())


def test_phase_equals_retrieve_phase_and_fbp(files):
    folder, g, raw, flat, dark, _ = files
    rc, vol = recon(folder, "raw.npy", "phase.npy", *raw_flags(folder), *PHASE_FLAGS, "--slab-slices", "4")
    assert rc == 0
    ref = leveret.fbp(retrieve_phase(normalize(raw, flat, dark), **PHASE), g, backend="cpu")
    assert max_rel(vol, ref) < 1e-3  # the filter's tail beyond the border rows
    plain = leveret.fbp(-np.log(normalize(raw, flat, dark)), g, backend="cpu")
    assert max_rel(plain, ref) > 1e-2  # the phase retrieval changed the result


def test_generalized_phase_is_passed_on(files):
    folder, g, raw, flat, dark, _ = files
    flags = [f if f != "paganin" else "generalized" for f in PHASE_FLAGS]
    rc, vol = recon(folder, "raw.npy", "gen.npy", *raw_flags(folder), *flags)
    assert rc == 0
    ref = leveret.fbp(retrieve_phase(normalize(raw, flat, dark), method="generalized", **PHASE), g, backend="cpu")
    assert max_rel(vol, ref) < 1e-3


def test_half_acquisition_equals_in_memory_stitching(files, capsys):
    folder, *_, half = files
    angles = np.linspace(0, 2 * np.pi, 360, endpoint=False)
    st = half_acquisition(half, angles, AXIS)
    ref = leveret.fbp(
        st.projections, leveret.ParallelGeometry(st.angles, 95, n_rows=12, center=st.center), backend="cpu"
    )
    rc, vol = recon(folder, "half.npy", "h.npy", "--angles", "0:360:360", "--half-acquisition", str(AXIS))
    assert rc == 0 and vol.shape == (12, 95, 95)
    assert max_rel(vol, ref) < 1e-5
    # auto: the axis found from the middle rows, within a tenth of a pixel here
    rc, auto = recon(folder, "half.npy", "ha.npy", "--angles", "0:360:360", "--half-acquisition", "auto")
    assert rc == 0 and auto.shape == (12, 95, 95)
    assert max_rel(auto, ref) < 0.05


@pytest.mark.parametrize(
    "method, flags, options",
    [
        (
            "all",
            ["--stripe-size", "5", "--stripe-large-size", "11", "--stripe-snr", "2.5"],
            {"size": 5, "large_size": 11, "snr": 2.5},
        ),
        (
            "wavelet-fft",
            ["--stripe-wavelet", "db3", "--stripe-level", "2", "--stripe-sigma", "1.5"],
            {"wavelet": "db3", "level": 2, "sigma": 1.5},
        ),
    ],
)
def test_stripe_methods_equal_remove_stripes_and_fbp(files, method, flags, options):
    if method == "wavelet-fft":
        pytest.importorskip("pywt")
    folder, *_, half = files
    proj = half[:180].copy()  # 180 degrees of the offset scan's rows
    proj[:, :, [10, 31]] += np.float32(0.05)
    np.save(folder / "striped.npy", proj)
    g = leveret.ParallelGeometry(np.linspace(0, np.pi, 180, endpoint=False), 56, n_rows=12)
    ref = leveret.fbp(remove_stripes(proj, method=method, **options), g, backend="cpu")
    rc, vol = recon(folder, "striped.npy", f"s_{method}.npy", "--angles", "0:180:180", "--stripes", method, *flags)
    assert rc == 0
    assert max_rel(vol, ref) < 1e-5
    # the parameters reach remove_stripes: its defaults give another result
    assert max_rel(leveret.fbp(remove_stripes(proj, method=method), g, backend="cpu"), ref) > 1e-4


def test_config_keys_equal_the_flags(files):
    folder, *_ = files
    (folder / "job.toml").write_text(
        'input = "raw.npy"\nangles = "0:180:90"\nflat = "flat.npy"\ndark = "dark.npy"\n'
        '[recon]\noutput = "cfg.npy"\nphase = "paganin"\nenergy = 20\ndistance = 0.3\n'
        'pixel-size = 4e-6\ndelta_beta = 100\nstripes = "all"\nstripe-size = 5\nstripe_large_size = 11\n'
        'backend = "cpu"\nno_progress = true\nquiet = true\noverwrite = true\n'
    )
    assert main(["recon", "--config", str(folder / "job.toml")]) == 0
    rc, flagged = recon(
        folder,
        "raw.npy",
        "flg.npy",
        *raw_flags(folder),
        *PHASE_FLAGS,
        "--stripes",
        "all",
        "--stripe-size",
        "5",
        "--stripe-large-size",
        "11",
    )
    assert rc == 0
    np.testing.assert_array_equal(read_array(folder / "cfg.npy"), flagged)
    (folder / "half.toml").write_text(
        'input = "half.npy"\nangles = "0:360:360"\n[recon]\noutput = "hc.npy"\n'
        f'half-acquisition = {AXIS}\nbackend = "cpu"\nquiet = true\n'
        "overwrite = true\n"
    )
    assert main(["recon", "--config", str(folder / "half.toml")]) == 0
    assert read_array(folder / "hc.npy").shape == (12, 95, 95)


def test_dry_run_shows_the_preprocessing_and_plans_for_it(files, capsys):
    folder, *_ = files
    assert (
        main(
            [
                "recon",
                str(folder / "raw.npy"),
                str(folder / "d.h5"),
                *raw_flags(folder),
                "--dry-run",
                "--backend",
                "cpu",
                "--host-memory",
                "1G",
            ]
        )
        == 0
    )
    plain = capsys.readouterr().out
    assert (
        main(
            [
                "recon",
                str(folder / "raw.npy"),
                str(folder / "d.h5"),
                *raw_flags(folder),
                *PHASE_FLAGS,
                "--stripes",
                "all",
                "--dry-run",
                "--backend",
                "cpu",
                "--host-memory",
                "1G",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "phase retrieval (paganin): 20 keV, 0.3 m, pixel 4e-06 m, delta/beta 100; 19 row(s) of context" in out
    assert "stripes all, size 21, snr 3.0, large_size 51" in out

    def one_slice(text):
        return [line.split()[1:3] for line in text.splitlines() if line.strip().startswith("1 ")]

    assert one_slice(out) != one_slice(plain)  # one slice costs more with the border rows and FFT buffers
    assert (
        main(
            [
                "recon",
                str(folder / "half.npy"),
                str(folder / "d.h5"),
                "--angles",
                "0:360:360",
                "--half-acquisition",
                str(AXIS),
                "--dry-run",
                "--backend",
                "cpu",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "half acquisition: axis at column 47.30; stitched to 180 view(s) of 95 column(s)" in out
    assert "volume 423 KiB" in out  # 12 x 95 x 95 float32: the stitched field of view
    assert not (folder / "d.h5").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--energy", "0"], "--energy: expected a photon energy in keV"),
        (["--distance", "-1"], "--distance: expected a sample-detector distance in metres"),
        (["--delta-beta", "0"], "--delta-beta: expected the ratio delta/beta"),
        (["--pixel-size", "6.5"], "--pixel-size: expected a pixel size in metres"),
        (["--pixel-size", "4e-6,5e-6"], "--pixel-size: phase retrieval takes square pixels"),
    ],
)
def test_phase_values_out_of_range_are_one_line_naming_the_flag(files, capsys, flags, message):
    folder, *_ = files
    args = list(PHASE_FLAGS)
    i = args.index(flags[0])
    args[i + 1] = flags[1]
    rc, _ = recon(folder, "raw.npy", "bad.npy", *raw_flags(folder), *args)
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith(f"leveret recon: error: {message}")
    assert not (folder / "bad.npy").exists()


@pytest.mark.parametrize(
    "source, flags, message",
    [
        (
            "raw.npy",
            ["--phase", "paganin", "--energy", "20"],
            (
                "--phase: needs --energy (keV), --distance (m), "
                "--pixel-size (m) and --delta-beta; missing --distance, --pixel-size, --delta-beta"
            ),
        ),
        ("raw.npy", ["--distance", "0.3"], "--distance: a parameter of --phase"),
        ("half.npy", ["--angles", "0:360:360", *PHASE_FLAGS], "--phase: phase retrieval takes transmissions"),
        ("raw.npy", ["--half-acquisition", "30"], "--half-acquisition: expected a 360-degree scan"),
        (
            "half.npy",
            ["--angles", "0:360:360", "--half-acquisition", "56"],
            "--half-acquisition: expected the rotation axis inside the detector, a column in [0, 55]",
        ),
        (
            "half.npy",
            ["--angles", "0:360:360", "--half-acquisition", "40", "--center", "40"],
            "--center: with --half-acquisition",
        ),
        (
            "half.npy",
            ["--angles", "0:360:360", "--stripes", "sort", "--stripe-wavelet", "db5"],
            "--stripe-wavelet: a parameter of --stripes wavelet-fft, not of --stripes sort",
        ),
        ("half.npy", ["--angles", "0:360:360", "--stripe-snr", "2"], "--stripe-snr: a parameter of --stripes all"),
        ("half.npy", ["--angles", "0:360:360", "--stripes", "all", "--stripe-snr", "1"], "--stripe-snr: expected"),
        (
            "half.npy",
            ["--angles", "0:360:360", "--stripes", "all", "--stripe-large-size", "10"],
            "--stripe-large-size: expected an odd integer",
        ),
        (
            "half.npy",
            ["--angles", "0:360:360", "--stripes", "all", "--stripe-size", "4"],
            "--stripe-size: expected an odd width",
        ),
        (
            "half.npy",
            [
                "--angles",
                "0:360:360",
                "--beam",
                "cone",
                "--sid",
                "100",
                "--sdd",
                "200",
                "--pixel-size",
                "1",
                "--half-acquisition",
                "40",
            ],
            "--half-acquisition: not available for cone-beam scans",
        ),
    ],
)
def test_preprocessing_mistakes_are_one_line_naming_the_flag(files, capsys, source, flags, message):
    folder, *_ = files
    if source == "raw.npy" and "--angles" not in flags:
        flags = [*raw_flags(folder), *flags]
    rc, _ = recon(folder, source, "bad.npy", *flags)
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"leveret recon: error: {message}"), err
    assert err.count("\n") == 1
    assert not (folder / "bad.npy").exists()
