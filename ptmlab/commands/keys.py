"""``ptmlab keys create|list|revoke|flagged``: API keys, their limits and usage, in the state store of
``ptmlab serve`` (``--state DIR`` or ``--state postgresql://...``, else ``$PTMLAB_STATE``, else ``$PTMLAB_HOME``)."""

from __future__ import annotations

import argparse
import datetime as dt


def _state_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state", default=None, help="state store: a directory (SQLite) or postgresql://USER@HOST:PORT/DB "
                                                 "(default: $PTMLAB_STATE, else $PTMLAB_HOME)")


def register(sub) -> None:
    p = sub.add_parser("keys", help="manage API keys of `ptmlab serve` (stored hashed)")
    ks = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    c = ks.add_parser("create", help="create a key; the key is printed alone on the last line, once")
    c.add_argument("--name", required=True, help="who the key is for")
    c.add_argument("--rate", type=float, default=50.0, help="token-bucket refill, texts per second (default 50)")
    c.add_argument("--burst", type=float, default=100.0,
                   help="token-bucket size: texts at once, and the most texts in one request (default 100)")
    c.add_argument("--daily-budget", type=int, default=100_000, help="texts per UTC day (default 100000)")
    c.add_argument("--scopes", default="predict",
                   help="what the key may do, comma-separated: predict (POST /v1/predict), admin (GET /metrics, every "
                        "key's counts) (default predict)")
    c.set_defaults(func=create)
    ls = ks.add_parser("list", help="keys with limits and usage")
    ls.set_defaults(func=list_keys)
    r = ks.add_parser("revoke", help="revoke a key by id or name")
    r.add_argument("key", metavar="ID_OR_NAME")
    r.set_defaults(func=revoke)
    f = ks.add_parser("flagged", help="keys whose audit log looks like an extraction attack (query detector)")
    f.add_argument("--threshold", type=float, default=0.5, help="flag when the mean detector score exceeds this")
    f.add_argument("--last", type=int, default=1000, help="score the newest N queries of each key (default 1000)")
    f.add_argument("--min-queries", type=int, default=20, help="ignore keys with fewer scored queries")
    f.set_defaults(func=flagged)
    for action in (c, ls, r, f):
        _state_arg(action)


def create(args: argparse.Namespace) -> int:
    from ptmlab.serve.state import check_limits, check_name, check_scopes, open_store

    name = check_name(args.name)  # before touching the store
    check_limits(args.rate, args.burst, args.daily_budget)
    scopes = check_scopes(args.scopes)
    key = open_store(args.state).create_key(name, args.rate, args.burst, args.daily_budget, scopes)
    print(f"created key '{name}' (rate {args.rate:g} texts/s, burst {args.burst:g} texts, daily budget "
          f"{args.daily_budget} texts, scopes {','.join(scopes)}); it is shown only now, store it safely:")
    print(key)
    return 0


def list_keys(args: argparse.Namespace) -> int:
    from ptmlab.serve.state import open_store, printable_name

    store = open_store(args.state)
    usage = store.usage()
    print(f"{'id':>4}  {'name':20} {'created (UTC)':17} {'status':8} {'rate/s':>7} {'burst':>6} {'budget/day':>10} "
          f"{'today':>8} {'queries':>9}  scopes")
    for k in store.list_keys():
        created = dt.datetime.fromtimestamp(k.created, dt.UTC).strftime("%Y-%m-%d %H:%M")
        status = "revoked" if k.revoked else "active"
        total = usage.get(k.id, {}).get("queries", 0)
        print(f"{k.id:>4}  {printable_name(k.name)[:20]:20} {created:17} {status:8} {k.rate:>7g} {k.burst:>6g} "
              f"{k.daily_budget:>10} {store.used_today(k.id):>8} {total:>9}  {','.join(k.scopes)}")
    return 0


def revoke(args: argparse.Namespace) -> int:
    from ptmlab.serve.state import open_store, printable_name

    store = open_store(args.state)
    k = store.resolve_key(args.key)
    store.revoke(k.id)
    print(f"revoked key {k.id} ('{printable_name(k.name)}')")
    return 0


def flagged(args: argparse.Namespace) -> int:
    from ptmlab.serve.defences import flag_keys
    from ptmlab.serve.state import open_store

    rows = flag_keys(open_store(args.state), args.threshold, args.last, args.min_queries)
    print(f"{'id':>4}  {'name':20} {'scored':>7} {'mean score':>10}  flagged")
    for r in rows:
        print(f"{r['key_id']:>4}  {r['name'][:20]:20} {r['scored']:>7} {r['mean_score']:>10.3f}  "
              f"{'YES' if r['flagged'] else 'no'}")
    return 0
