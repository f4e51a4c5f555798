"""``agentlog erase --run RUN | --subject ID``: crypto-shred a run's or a data subject's contents."""

from __future__ import annotations

import argparse

from runtime.client import Client
from runtime.config import Settings
from runtime.erasure import erase_run, erase_subject


def _erase(args: argparse.Namespace, settings: Settings) -> int:
    with Client(settings, identity="cli") as client:
        if args.run is not None:
            key_id = erase_run(client, args.run)
            print(f"erased run {args.run}: key {key_id} destroyed")
        else:
            key_id = erase_subject(client, args.subject)
            print(f"erased subject {args.subject}: key {key_id} destroyed")
    return 0


def add_erase_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    erase = subparsers.add_parser(
        "erase",
        help="destroy the data key of an ended run or of a data subject (its contents read as erased)",
    )
    which = erase.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--run",
        help="the run id (a run that has ended; one submitted with a subject: once the subject's runs all have)",
    )
    which.add_argument(
        "--subject",
        help="the data subject every run submitted with it is about (once all those runs have ended)",
    )
    erase.set_defaults(func=_erase)
