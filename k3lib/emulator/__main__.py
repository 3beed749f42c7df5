"""`python -m k3lib.emulator [--port 0] [--fault NAME] …`: serve until interrupted."""

from __future__ import annotations

import argparse

from .cli import add_arguments, config_from_args
from .server import serve_forever


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m k3lib.emulator", description="vLLM-compatible emulator")
    add_arguments(parser)
    ns = parser.parse_args(argv)
    serve_forever(config_from_args(ns), host=ns.host, port=ns.port)


if __name__ == "__main__":
    main()
