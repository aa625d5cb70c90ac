"""``ptmlab push``: publish a run directory or an export to the Hugging Face Hub through huggingface_hub.

The hub client does the work (``HfApi.create_repo`` + ``upload_folder``); ptmlab only checks the inputs first (a
model directory, a valid repo id), makes sure a model card is there, and turns the offline / unreachable cases into
one-line errors. Resumable state (``checkpoint/``) and temporary files are never uploaded.
"""

from __future__ import annotations

import os
from pathlib import Path

from ptmlab.core.errors import PtmlabError

IGNORE = ["checkpoint/*", ".*", "**/.*", "optimizer.safetensors", "rng.safetensors", "*.pid", "*.log"]


def check_folder(path: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise PtmlabError(f"'{path}' is not a directory: pass a run directory or an export written by ptmlab export")
    if not (p / "config.json").is_file() or not (any(p.glob("*.safetensors")) or any(p.glob("*.onnx"))):
        raise PtmlabError(f"'{path}' holds no model (config.json and *.safetensors or *.onnx): pass a finished run "
                          f"directory or an export")
    return p


def check_repo_id(repo: str) -> str:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not repo:
        raise PtmlabError("no repository: pass --repo NAME or --repo OWNER/NAME")
    try:
        validate_repo_id(repo)
    except HFValidationError as e:
        raise PtmlabError(f"--repo '{repo}' is not a valid hub repository id ({str(e).splitlines()[0]}): use "
                          f"OWNER/NAME with letters, digits, '-', '_' and '.'") from None
    return repo


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def push(path: str, repo: str, private: bool = False) -> str:
    """Create ``repo`` (if needed) and upload the folder; returns the repository URL."""
    folder = check_folder(path)
    repo = check_repo_id(repo)
    if hub_offline():
        raise PtmlabError("the Hugging Face Hub is offline here (HF_HUB_OFFLINE=1): set HF_HUB_OFFLINE=0 and log in "
                          "(`hf auth login` or HF_TOKEN) to push")
    from huggingface_hub import HfApi

    from ptmlab.report.model_card import write_model_card

    if not (folder / "README.md").is_file():
        write_model_card(folder)
    api = HfApi()
    try:
        url = api.create_repo(repo, private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo, ignore_patterns=IGNORE,
                          commit_message="Upload model from ptmlab")
    except Exception as e:  # connection errors, auth errors, hub-side refusals: one line each
        name = type(e).__name__
        text = str(e).splitlines()[0][:200] if str(e) else name
        if "Connection" in name or "Offline" in name or "Timeout" in name or "resolve" in text.lower():
            raise PtmlabError(f"the Hugging Face Hub is unreachable (offline?): {text}") from None
        raise PtmlabError(f"the hub refused the push to '{repo}' ({name}: {text}): check your token "
                          f"(`hf auth login`) and the repository name") from None
    return str(url)
