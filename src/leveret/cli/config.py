"""``--config file.toml|yaml``: a file of option values equivalent to the flags.

Keys are the long flag names without dashes (``det-spacing`` or
``det_spacing``), positional arguments by name (``input``, ``output``).
Values are checked and converted exactly as on the command line; flags given
on the command line win over the file. Relative paths in the file (input,
output, flats, darks, an angle file, PNGs, JSON) are relative to the file's
folder, not to the current folder, so a job file travels with its data. A
table named after the subcommand
(``[recon]``) holds keys for that subcommand only, so one file can serve
several::

    # scan.toml
    input = "projections/"
    angles = "angles.txt"
    flat = "flat.tif"
    dark = "dark.tif"

    [recon]
    output = "rec.h5"
    center = "auto"
    filter = "hann"
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

# Options whose values are files or folders: resolved against the config file's folder.
PATH_OPTIONS = {"input", "output", "flat", "dark", "montage", "output_dir", "json", "save"}
# --angles is a file or a range such as "0:180:720" or "-90:90:181:endpoint".
_ANGLE_RANGE = re.compile(r"\s*[-+0-9.eE]+:[-+0-9.eE]+:[0-9]+(:\w+)?\s*")


def load_config(path: str) -> dict:
    """The key/value table of a TOML (``.toml``) or YAML (``.yaml``/``.yml``) file.

    Raises
    ------
    ValueError
        Naming ``--config``: a missing file, an unknown extension, a parse
        error, YAML without PyYAML installed, or a top level that is not a table.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--config: no such file: {str(p)!r}")
    ext = p.suffix.lower()
    text = p.read_bytes()
    if ext == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10
            try:
                import tomli as tomllib
            except ImportError:
                raise ValueError("--config: reading TOML needs Python 3.11+ or the tomli package") from None
        try:
            data = tomllib.loads(text.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"--config: {str(p)!r} is not valid TOML: {exc}") from None
    elif ext in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ValueError(
                "--config: YAML files need PyYAML (pip install pyyaml, or "
                "pip install 'leveret[io]'); TOML works without it"
            ) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"--config: {str(p)!r} is not valid YAML: {exc}") from None
        data = {} if data is None else data
    else:
        raise ValueError(f"--config: expected a .toml, .yaml or .yml file, got {str(p)!r}")
    if not isinstance(data, dict):
        raise ValueError(f"--config: {str(p)!r} must hold a table of option = value, got {type(data).__name__}")
    return data


def apply_config(parser: argparse.ArgumentParser, command: str, table: dict, source: str, commands=()) -> dict:
    """Turn a config table into defaults for ``parser`` (the subcommand's).

    Each value goes through the option's own ``type`` and ``choices``, so a
    file is checked as strictly as the command line. A table (``[name]``)
    must be named after one of ``commands`` (the subcommands; the tables of
    the others are left to them); any other is an error with the closest
    name. Returns ``{dest: value}``.
    """
    actions = {}
    for a in parser._actions:
        if a.dest in ("help", "config", argparse.SUPPRESS):
            continue
        names = [a.dest] + [s.lstrip("-") for s in a.option_strings if s.startswith("--")]
        for n in names:
            actions[n] = a
            actions[n.replace("-", "_")] = a
    flat = {k: v for k, v in table.items() if not isinstance(v, dict)}
    tables = set(commands) | {command}
    for name, value in table.items():
        if isinstance(value, dict) and name not in tables:
            raise ValueError(
                f"--config: {source!r}: unknown table [{name}]{_did_you_mean(name, tables, '[{}]')}; "
                f"tables hold the options of one command: {', '.join(f'[{t}]' for t in sorted(tables))}"
            )
    section = table.get(command)
    if isinstance(section, dict):
        flat.update(section)
    out = {}
    for key, value in flat.items():
        a = actions.get(str(key)) or actions.get(str(key).replace("-", "_"))
        if a is None:
            known = sorted({x.dest for x in actions.values()})
            raise ValueError(
                f"--config: {source!r}: unknown option {key!r} for '{command}'"
                f"{_did_you_mean(str(key).replace('-', '_'), known)}; known: {', '.join(known)}"
            )
        out[a.dest] = _relative_to_file(a.dest, _convert(a, key, value, source), os.path.dirname(source))
    return out


def _did_you_mean(name: str, options, form: str = "{!r}") -> str:
    """ " (did you mean X?)" with the closest of ``options`` to ``name``, or nothing."""
    import difflib

    close = difflib.get_close_matches(str(name), sorted(options), n=1, cutoff=0.6)
    return f" (did you mean {form.format(close[0])}?)" if close else ""


def _relative_to_file(dest: str, value, folder: str):
    """A relative path of a path option, joined to the config file's folder."""
    if (dest not in PATH_OPTIONS and dest != "angles") or not isinstance(value, str) or not value:
        return value
    if os.path.isabs(os.path.expanduser(value)):
        return os.path.expanduser(value)
    joined = os.path.join(folder, value)  # keeps a trailing "/" (a folder output)
    if dest == "angles" and _ANGLE_RANGE.fullmatch(value) and not os.path.isfile(joined):
        return value  # a range; an existing file wins, as in read_angles
    return joined


def _convert(action: argparse.Action, key: str, value, source: str):
    where = f"--config: {source!r}: {key}"
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false, got {value!r}")
        return value if isinstance(action, argparse._StoreTrueAction) else not value
    if isinstance(action, argparse._CountAction):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{where}: expected a count (0, 1, 2 ...), got {value!r}")
        return value
    if isinstance(value, (dict, list)) and action.nargs is None:
        raise ValueError(f"{where}: expected a single value, got {value!r}")
    if action.type is not None:
        try:
            value = action.type(value if not isinstance(value, bool) else str(value))
        except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
            raise ValueError(f"{where}: invalid value {value!r} ({exc})") from None
    elif value is not None and not isinstance(value, str):
        value = str(value)
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"{where}: expected one of {', '.join(map(str, action.choices))}, got {value!r}")
    return value
