"""``ptmlab push``: publish a run directory or export to the Hugging Face Hub (needs the hub to be online)."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("push", help="upload a run directory or export to the Hugging Face Hub",
                       description="Create the hub repository (if needed) and upload the model directory with its "
                                   "model card through huggingface_hub. Offline (HF_HUB_OFFLINE=1, the default "
                                   "here) it stops with an error.")
    p.add_argument("model", metavar="RUN_OR_EXPORT_DIR", help="a run directory or a directory written by export")
    p.add_argument("--repo", required=True, help="hub repository id, NAME or OWNER/NAME")
    p.add_argument("--private", action="store_true", help="create the repository as private")
    p.set_defaults(func=_push)


def _push(args: argparse.Namespace) -> int:
    from ptmlab.export.push import push

    print(f"pushed to {push(args.model, args.repo, args.private)}")
    return 0
