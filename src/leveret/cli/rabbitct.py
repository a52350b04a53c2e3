"""``leveret rabbitct``: the RabbitCT benchmark."""

from __future__ import annotations

import json
from pathlib import Path


from .scan import _check_output, _say


def rabbitct(args) -> int:
    from ..io import atomic_output
    from ..rabbitct import make_dataset, read_rabbitct, run_benchmark, write_rabbitct

    if args.size < 1:
        raise ValueError(f"--size: expected a positive volume edge, got {args.size}")
    if args.json is not None:
        _check_output(Path(args.json), overwrite=True, flag="--json", args=args, asked_by=None)
    if args.save is not None:  # before the synthetic dataset is made (minutes)
        if args.input is not None:
            raise ValueError("--save: writes the synthetic dataset; not with --input")
        _check_output(Path(args.save), overwrite=False, flag="--save", hint="choose another name", args=args)
    if args.input is not None:
        data = read_rabbitct(args.input)
        reference = None  # the file's own reference volumes
    else:
        shape = dict(n_views=124, n_rows=240, n_cols=312) if args.small else {}
        cache: dict = {}
        _say(
            args,
            f"making a synthetic RabbitCT dataset{' (small)' if args.small else ''} and its "
            f"float64 reference at L = {args.size} ...",
        )
        data = make_dataset(
            reference_sizes=(args.size,), cache=cache, progress=not args.quiet, backend=args.backend, **shape
        )
        reference = cache[args.size]
        if args.save:
            write_rabbitct(args.save, data)
    result = run_benchmark(data, args.size, backend=args.backend, repeats=args.repeats, reference=reference)
    print(result.table())
    if args.json:
        with atomic_output(args.json, overwrite=True) as tmp:
            tmp.write_text(json.dumps(result.to_dict(), indent=1))
    return 0
