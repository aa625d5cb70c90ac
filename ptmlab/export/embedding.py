"""Export of a sentence embedder (an embedding run, a ``distill-embeddings`` run): the sentence-transformers layout.

The folder holds the encoder's weights (safetensors), its tokenizer, ``modules.json`` (Transformer -> Pooling ->
Normalize), ``1_Pooling/config.json`` and ``sentence_bert_config.json``, so ``SentenceTransformer(DIR)`` loads it.
The parity check embeds sentences (the run's dev texts, else a fixed set) with ptmlab's model and with the export as
sentence-transformers loads it (ptmlab's own loader when that package is absent) and records the lowest cosine
between the two vectors of a sentence (``parity.json``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json, replace_folder

SENTENCES = (
    "A man is playing a guitar on the street.", "The cat sleeps on the warm windowsill.",
    "Stock markets fell sharply after the announcement.", "She ordered a coffee and a slice of cake.",
    "The train to Paris leaves at nine o'clock.", "Heavy rain flooded several roads overnight.",
    "Children are building a sandcastle at the beach.", "The committee approved the new budget.",
    "How do I reset my password?", "A dog runs across the green field.",
    "Quantum computers use qubits instead of bits.", "He forgot his umbrella at the office.",
)


def parity_sentences(source: str, limit: int) -> list[str]:
    """The run's dev texts (both sides, first ``limit``) when its data can be read again, else ``SENTENCES``."""
    texts: list[str] = []
    try:
        import contextlib
        import io

        from ptmlab.core.rundir import RunDir
        from ptmlab.data.taskdata import load_task_data
        from ptmlab.export.parity import parity_data_args

        recorded = RunDir(source).read_config() if (Path(source) / "config.yaml").is_file() else {}
        if recorded.get("task_kind") == "embedding":
            with contextlib.redirect_stderr(io.StringIO()):  # its note when the run's data cannot be read again
                cfg = parity_data_args(source, None, {}, 0)
            if cfg.task_kind == "embedding":
                dev = load_task_data(cfg, need_train=False).split("dev")
                texts = list(dict.fromkeys([*dev.anchor, *dev.positive]))
    except (PtmlabError, OSError, TypeError, ValueError):
        texts = []
    texts = texts[:limit] if limit else texts
    return texts or list(SENTENCES)


def export_embedding(cfg, source: str, out: Path) -> dict:
    """Write ``source``'s sentence embedder into ``out`` (sentence-transformers layout) with its parity check."""
    import numpy as np

    from ptmlab.report.model_card import write_model_card
    from ptmlab.train.embedding import embed_texts
    from ptmlab.train.sentence import load_sentence_model, save_sentence_model

    if cfg.format != "transformers":
        raise PtmlabError(f"--format {cfg.format} is not available for a sentence embedder: use --format transformers "
                          f"(the sentence-transformers layout)")
    model, tokenizer = load_sentence_model(source)
    model.eval()
    texts = parity_sentences(source, cfg.parity_examples)
    length = cfg.max_length or model.max_seq_length
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o777 & ~mask)
        save_sentence_model(model, tokenizer, tmp)
        reference = embed_texts(model, tokenizer, texts, length)
        exported, loader = exported_vectors(tmp, texts, length)
        cos = (reference * exported).sum(1) / np.clip(np.linalg.norm(reference, axis=1)
                                                       * np.linalg.norm(exported, axis=1), 1e-12, None)
        parity = {"kind": "embedding", "examples": len(texts), "loaded_with": loader,
                  "min_cosine": float(cos.min()), "max_abs_diff": float(np.abs(reference - exported).max()),
                  "dimension": int(reference.shape[1]), "pooling": model.describe()}
        info = {"format": cfg.format, "source": str(cfg.model), "layout": "sentence-transformers",
                "parity": parity, "output": str(out)}
        atomic_write_json(tmp / "parity.json", parity)
        card = write_model_card(tmp, source=source)
        card.write_text(card.read_text(encoding="utf-8").rstrip("\n") + "\n\n" + "\n".join([
            "## Sentence embeddings", "",
            f"A sentence embedder ({model.describe()}, {parity['dimension']} dimensions) in the sentence-transformers "
            f"layout. Parity with ptmlab's model on {len(texts)} sentences ({loader}): lowest cosine "
            f"{parity['min_cosine']:.6f}, max |difference| {parity['max_abs_diff']:.3g}.", "",
            "```python", "from sentence_transformers import SentenceTransformer", "",
            f"model = SentenceTransformer('{out.name}')",
            "vectors = model.encode(['A first sentence.', 'Another one.'])",
            "```", ""]), encoding="utf-8")
        replace_folder(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def exported_vectors(path: Path, texts: list[str], length: int):
    """(vectors, what loaded them): sentence-transformers when installed, else ptmlab's loader of the folder."""
    try:
        import sentence_transformers
        from sentence_transformers import SentenceTransformer
    except ImportError:
        from ptmlab.train.embedding import embed_texts
        from ptmlab.train.sentence import load_sentence_model

        model, tok = load_sentence_model(str(path))
        return embed_texts(model.eval(), tok, texts, length), "ptmlab"
    st = SentenceTransformer(str(path), device="cpu")
    st.max_seq_length = length
    vec = st.encode(texts, batch_size=64, convert_to_numpy=True, show_progress_bar=False)
    return vec.astype("float32"), f"sentence-transformers {sentence_transformers.__version__}"
