"""A deterministic noisy corpus with known truth, to measure a cleaner (tests, the benchmark, the data-quality study).

``make_noisy_corpus(text_docs, seed)`` takes clean English prose documents (one paragraph per line), puts web
boilerplate lines inside some of them, and mixes in noise documents of six kinds: pages of boilerplate, navigation
menus, exact copies and lightly edited copies of earlier clean documents, source code, and text in other languages
(word sequences drawn from wordfreq's frequency lists, so no foreign corpus is needed). Copies always come after
their original, as the first copy is the one a deduplicator keeps. ``load_text_documents`` makes the clean documents
from the shared WikiText-2 and Gutenberg prose.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

NOISE_KINDS = ("boilerplate", "menu", "exact_dup", "near_dup", "code", "foreign")

BOILERPLATE_LINES = [
    "This website uses cookies to improve your experience.",
    "We use cookies to personalise content and ads. Accept all cookies",
    "Copyright 2023 Example Media Ltd. All rights reserved.",
    "Click here to subscribe to our newsletter!",
    "Share this article on Facebook | Twitter | Email",
    "Read more",
    "Posted by admin on March 3, 2021",
    "Sign up for our weekly newsletter and never miss a story!",
    "Please enable JavaScript in your browser to view this page.",
    "By using this site you agree to our Terms of Use and Privacy Policy.",
    "Follow us on Instagram",
    "Leave a comment",
    "Related posts",
    "Back to top",
    "Advertisement",
    "Skip to main content",
    "Log in or register to post comments",
    "Powered by WordPress",
    "You may also like:",
    "Tags: news, travel, history",
]
MENU_ITEMS = ["Home", "About", "Blog", "News", "Contact", "Shop", "Products", "Services", "FAQ", "Careers", "Login",
              "Register", "Cart", "Search", "Events", "Gallery", "Support", "Press", "Team", "Pricing", "Docs",
              "Archive", "Categories", "Sports", "Weather", "Travel", "Health", "Science", "Opinion", "Video"]
FOREIGN = ("de", "fr", "es", "it", "nl", "pt", "pl", "sv")
_CODE = [
    "def {f}({a}, {b}):\n    result = []\n    for item in {a}:\n        if item > {b}:\n            "
    "result.append(item * 2)\n    return result\n\n\nif __name__ == \"__main__\":\n    print({f}([1, 2, 3], {n}))",
    "function {f}({a}, {b}) {{\n  const out = {a}.map((x) => x + {b});\n  if (out.length > {n}) {{\n    "
    "return out.slice(0, {n});\n  }}\n  return out;\n}}\nmodule.exports = {{ {f} }};",
    "#include <stdio.h>\n\nint {f}(int {a}, int {b}) {{\n    int total = 0;\n    for (int i = 0; i < {a}; i++) "
    "{{\n        total += i * {b};\n    }}\n    return total;\n}}\n\nint main(void) {{\n    printf(\"%d\\n\", "
    "{f}({n}, 3));\n    return 0;\n}}",
    "SELECT {a}.id, {a}.name, COUNT({b}.id) AS total\nFROM {a}\nJOIN {b} ON {b}.{a}_id = {a}.id\nWHERE "
    "{a}.created_at > '2020-01-01'\nGROUP BY {a}.id, {a}.name\nHAVING COUNT({b}.id) > {n}\nORDER BY total DESC;",
]
_NAMES = ["load_items", "parse_rows", "compute", "merge", "users", "orders", "values", "limit", "count", "scale"]


@dataclass
class Truth:
    """What one generated document is: ``kind`` is 'clean' or a noise kind; inserted boilerplate lines listed."""

    id: str
    kind: str
    boilerplate_lines: list[str] = field(default_factory=list)
    source: str = ""


def _boilerplate_page(rng: random.Random) -> str:
    lines = rng.sample(BOILERPLATE_LINES, rng.randint(5, 9))
    return "\n".join(lines)


def _menu(rng: random.Random) -> str:
    rows = []
    for _ in range(rng.randint(3, 7)):
        items = rng.sample(MENU_ITEMS, rng.randint(4, 8))
        rows.append(rng.choice([" | ", " > ", "  ", " - ", " / "]).join(items))
    return "\n".join(rows)


def _code(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 3)):
        a, b = rng.sample(_NAMES[4:], 2)
        parts.append(rng.choice(_CODE).format(f=rng.choice(_NAMES[:4]), a=a, b=b, n=rng.randint(2, 99)))
    return "\n\n".join(parts)


def _foreign(rng: random.Random) -> str:
    from wordfreq import top_n_list

    words = top_n_list(rng.choice(FOREIGN), 3000)
    weights = [1.0 / (i + 10) for i in range(len(words))]
    paras = []
    for _ in range(rng.randint(2, 4)):
        sents = []
        for _ in range(rng.randint(3, 6)):
            s = rng.choices(words, weights, k=rng.randint(8, 18))
            sents.append(" ".join(s).capitalize() + rng.choice([".", ".", ".", "?", "!"]))
        paras.append(" ".join(sents))
    return "\n".join(paras)


def _near_copy(text: str, rng: random.Random, rate: float) -> str:
    """Edit about ``rate`` of the words (substitute, delete or duplicate a neighbour), keep lines."""
    out_lines = []
    for line in text.split("\n"):
        words = line.split()
        new: list[str] = []
        for w in words:
            r = rng.random()
            if r < rate / 3:
                continue
            if r < 2 * rate / 3:
                new.append(rng.choice(words))
            elif r < rate:
                new.extend([w, rng.choice(words)])
            else:
                new.append(w)
        if words and not new[-1:] == words[-1:]:
            new.append(words[-1])  # keep the line's final punctuation, as a copied page would
        out_lines.append(" ".join(new))
    return "\n".join(out_lines)


def make_noisy_corpus(text_docs: list[str], seed: int = 0, noise_fraction: float = 0.4,
                      boilerplate_fraction: float = 0.5, near_edit_rate: float = 0.03
                      ) -> tuple[list[dict], list[Truth]]:
    """Clean documents with boilerplate lines inside, plus noise documents; returns (docs, truth) in corpus order.

    ``noise_fraction`` of the output documents are noise, spread evenly over ``NOISE_KINDS``; ``boilerplate_fraction``
    of the clean documents get 1-3 boilerplate lines between their paragraphs.
    """
    rng = random.Random(seed)
    clean = []
    for i, text in enumerate(text_docs):
        paras = [p for p in text.split("\n") if p.strip()]
        inserted: list[str] = []
        if rng.random() < boilerplate_fraction:
            for line in rng.sample(BOILERPLATE_LINES, rng.randint(1, 3)):
                paras.insert(rng.randint(0, len(paras)), line)
                inserted.append(line)
        clean.append(({"id": f"doc{i:05d}", "text": "\n".join(paras)}, Truth(f"doc{i:05d}", "clean", inserted)))
    order = list(clean)
    rng.shuffle(order)
    n_noise = round(len(clean) * noise_fraction / (1 - noise_fraction))
    makers = {"boilerplate": _boilerplate_page, "menu": _menu, "code": _code, "foreign": _foreign}
    for j in range(n_noise):
        kind = NOISE_KINDS[j % len(NOISE_KINDS)]
        nid = f"noise{j:05d}"
        if kind in makers:
            order.insert(rng.randint(0, len(order)), ({"id": nid, "text": makers[kind](rng)}, Truth(nid, kind)))
            continue
        pos = rng.randint(1, len(order))
        earlier = [k for k in range(pos) if order[k][1].kind == "clean"]
        if not earlier:
            pos, earlier = len(order), [k for k in range(len(order)) if order[k][1].kind == "clean"]
        src_doc, src_truth = order[rng.choice(earlier)]
        body = "\n".join(p for p in src_doc["text"].split("\n") if p not in src_truth.boilerplate_lines)
        text = src_doc["text"] if kind == "exact_dup" else _near_copy(body, rng, near_edit_rate)
        order.insert(pos, ({"id": nid, "text": text}, Truth(nid, kind, source=src_truth.id)))
    return [d for d, _ in order], [t for _, t in order]


# ------------------------------------------------------------------------------------- clean documents from files
_DETOK = [(" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), (" , ", ", "), (" . ", ". "), (" ; ", "; "),
          (" : ", ": "), (" 's ", "'s "), ("( ", "("), (" )", ")"), (" n't", "n't"), (" ?", "?"), (" !", "!")]


def _detok_wiki(line: str) -> str:
    line = line.strip()
    for a, b in _DETOK:
        line = line.replace(a, b)
    line = re.sub(r'" ([^"]*?) "', r'"\1"', line)
    if line.endswith(" ."):
        line = line[:-2] + "."
    return line.replace("<unk>", "unknown")


def _wiki_paragraphs(path: Path) -> list[list[str]]:
    """Articles of WikiText (split at top-level ' = Title = ' lines) as lists of paragraphs."""
    articles: list[list[str]] = []
    for raw in path.read_text(encoding="utf-8").split("\n"):
        s = raw.strip()
        if re.fullmatch(r"= [^=].* =", s):
            articles.append([])
        elif s and not s.startswith("=") and articles and len(s.split()) >= 25:
            articles[-1].append(_detok_wiki(s))
    return [a for a in articles if a]


def _book_paragraphs(path: Path) -> list[str]:
    """Prose paragraphs of a Gutenberg book, unwrapped; headings and short lines dropped."""
    text = path.read_text(encoding="utf-8", errors="replace")
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    return [p for p in paras if len(p.split()) >= 25 and p[-1] in ".!?\"'" and "Gutenberg" not in p
            and not p.isupper()]


PROSE_BOOKS = ("austen-emma.txt", "austen-persuasion.txt", "austen-sense.txt", "chesterton-ball.txt",
               "chesterton-brown.txt", "chesterton-thursday.txt")


def load_text_documents(root: str | Path, n: int, seed: int = 0, min_words: int = 120) -> list[str]:
    """``n`` clean prose documents from ROOT/wikitext-2 and ROOT/gutenberg prose: consecutive paragraphs of one
    article or book, one per line, gathered until the document has at least ``min_words`` words."""
    root = Path(root)
    rng = random.Random(seed)
    groups: list[list[str]] = []
    for split in ("valid.txt", "test.txt"):
        p = root / "wikitext-2" / split
        if p.is_file():
            groups.extend(_wiki_paragraphs(p))
    for book in PROSE_BOOKS:
        p = root / "gutenberg" / book
        if p.is_file():
            paras = _book_paragraphs(p)
            groups.extend(paras[i:i + 12] for i in range(0, len(paras), 12))
    docs = []
    for g in groups:
        cur: list[str] = []
        for para in g:
            cur.append(para)
            if sum(len(p.split()) for p in cur) >= min_words:
                docs.append("\n".join(cur))
                cur = []
    rng.shuffle(docs)
    return docs[:n]


def score(truth: list[Truth], kept: dict[str, str]) -> dict:
    """How a cleaner did against the truth; ``kept`` maps the ids of kept documents to their cleaned text.

    noise_removed: share of noise documents gone; clean_kept: share of clean documents kept; boilerplate_removed:
    share of inserted boilerplate lines gone (inside kept documents, or with their document).
    """
    noise = [t for t in truth if t.kind != "clean"]
    clean = [t for t in truth if t.kind == "clean"]
    lines = [(t, line) for t in clean for line in t.boilerplate_lines]
    gone = sum(1 for t, line in lines if t.id not in kept or line not in kept[t.id].split("\n"))
    by_kind = {k: sum(t.id not in kept for t in noise if t.kind == k) / max(1, sum(t.kind == k for t in noise))
               for k in NOISE_KINDS}
    return {"noise_removed": sum(t.id not in kept for t in noise) / max(1, len(noise)),
            "clean_kept": sum(t.id in kept for t in clean) / max(1, len(clean)),
            "boilerplate_removed": gone / max(1, len(lines)),
            "noise_removed_by_kind": by_kind, "noise_docs": len(noise), "clean_docs": len(clean),
            "boilerplate_lines": len(lines)}
