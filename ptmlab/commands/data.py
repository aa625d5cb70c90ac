"""``ptmlab data``: where each built-in task is read from on this machine and how to get it; ``ptmlab data get
TASK`` fetches a task's hub copy into the datasets cache (online), so that it loads offline afterwards."""

from __future__ import annotations

import argparse

HELP = "list the built-in tasks, where each is read from here and how to get it; `data get TASK` fetches one"


def register(sub) -> None:
    p = sub.add_parser("data", help=HELP, description=HELP + ". A built-in task is read from the local data folder "
                       "($PTMLAB_DATA_DIR, else ../shared/data) when it is there, else from its Hugging Face Hub "
                       "copy in the datasets cache (fetched on first use when the hub is online).")
    p.add_argument("action", nargs="?", default="list", metavar="list|get",
                   help="list (default), or get: fetch the hub copies of TASKS (needs HF_HUB_OFFLINE=0 "
                        "HF_DATASETS_OFFLINE=0)")
    p.add_argument("tasks", nargs="?", default=None, metavar="TASKS",
                   help="comma-separated built-in tasks (default: all; for get, every task with a hub copy)")
    p.set_defaults(func=run)


def _tasks(text: str | None, default: list[str]) -> list[str]:
    from ptmlab.core.errors import PtmlabError
    from ptmlab.data.tasks import TASKS

    if not text:
        return default
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in names if t not in TASKS]
    if unknown:
        raise PtmlabError(f"'{unknown[0]}' is not a built-in task: choose from {', '.join(TASKS.names())}")
    return names


def _status(loc) -> tuple[str, str]:
    """(how the task is read here, from where): local / package / hub (cached, or fetched on first use online) /
    not available."""
    if loc.kind in ("local", "package"):
        return loc.kind, loc.where
    if loc.kind == "hub" and loc.cached:
        return "hub, cached", loc.where
    if loc.kind == "hub" and loc.available:
        return "hub, online", f"{loc.where} (fetched into the datasets cache on first use)"
    if loc.kind == "hub":
        return "not available", f"hub {loc.where} not in the datasets cache, hub offline; not in {loc.looked[-1]}"
    return "not available", f"not in {loc.looked[-1]}" if loc.looked else "-"


def run(args: argparse.Namespace) -> int:
    from ptmlab.data.loaders import get_command, locate_task
    from ptmlab.data.tasks import HUB_COPIES, TASKS

    action, names = args.action, args.tasks
    if action not in ("list", "get") and names is None:  # `ptmlab data sst2,squad`: list those
        action, names = "list", action
    if action not in ("list", "get"):
        from ptmlab.core.errors import PtmlabError

        raise PtmlabError(f"'{action}' is not an action of ptmlab data: use list or get (ptmlab data get TASK)")
    if action == "get":
        return _get(_tasks(names, list(HUB_COPIES)))
    rows = [("task", "status", "read from", "to get it")]
    rows += [(name, *_status(locate_task(name)), get_command(name)) for name in _tasks(names, TASKS.names())]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(f"{c:{w}}" for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3])
    print("A task is read from the local data folder ($PTMLAB_DATA_DIR, else ../shared/data) when it is there, "
          "else from its hub copy in the datasets cache.")
    return 0


def _get(tasks: list[str]) -> int:
    from ptmlab.core.errors import PtmlabError
    from ptmlab.data.loaders import get_command, hub_offline, load_hub_copy, locate_task
    from ptmlab.data.tasks import HUB_COPIES, TASKS

    fetch = [t for t in tasks if t in HUB_COPIES and locate_task(t).kind == "hub"]
    if fetch and hub_offline():
        raise PtmlabError(f"ptmlab data get fetches from the hub, which is offline (HF_HUB_OFFLINE=1 is the "
                          f"default): run `HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0 ptmlab data get "
                          f"{','.join(fetch)}`")
    for name in tasks:
        loc = locate_task(name)
        if name not in HUB_COPIES:
            status, where = _status(loc)
            print(f"{name}: no hub copy; {status}: {where}; to get it: {get_command(name)}")
        elif loc.kind == "local":
            print(f"{name}: read from the local copy {loc.where}: nothing to fetch")
        else:
            data = load_hub_copy(TASKS.get(name))
            sizes = ", ".join(f"{split} {len(part):,}" for split, part in data.splits.items())
            print(f"{name}: hub dataset {loc.where} in the datasets cache ({sizes})")
    return 0
