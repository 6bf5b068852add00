"""``jobttl-emulator``: serve the Kubernetes API emulator in the foreground.

For tests, demos and the local stack (``make run``); it is not part of jobttl's product.
"""

from __future__ import annotations

import argparse
import logging
import sys

from .resources import WELL_KNOWN
from .server import run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jobttl-emulator", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=6443, help="port to listen on (default: 6443)")
    parser.add_argument(
        "--seed",
        action="append",
        default=[],
        metavar="YAML",
        help="create the objects in this file at start (repeatable)",
    )
    parser.add_argument(
        "--crd",
        action="append",
        default=[],
        metavar="YAML",
        help="also serve the kinds of the CustomResourceDefinitions in this file, with their schemas "
        "and printer columns (repeatable)",
    )
    parser.add_argument("--write-kubeconfig", metavar="PATH", help="write a kubeconfig pointing at the emulator")
    parser.add_argument(
        "--gc-delay",
        type=float,
        default=0.5,
        help="seconds the emulated garbage collector waits before each step (default: 0.5)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        run(
            args.host,
            args.port,
            seed_paths=args.seed,
            kubeconfig_path=args.write_kubeconfig,
            gc_delay=args.gc_delay,
            resources=WELL_KNOWN,
            crds=args.crd,
        )
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
