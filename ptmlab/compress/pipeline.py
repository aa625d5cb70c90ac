"""``ptmlab compress RUN --steps vocab,heads=0.4,ffn=0.3,int8``: apply steps in order, measure after each.

A step is ``fn(state, arg) -> None`` registered in ``STEPS``; it changes ``state.model`` / ``state.tokenizer``.
Structural steps (heads, ffn, params, layers, magnitude, lowrank, share) are followed by recovery fine-tuning
when ``--recover-epochs`` > 0; lowrank and share must follow every slicing step.
``int8`` (onnxruntime dynamic int8) ends the pipeline: the result is an ONNX file. With ``--distill-alpha`` every
recovery distils from the model as it was before the first structural step (``prune.teacher_loss``: sentence
logits, or per-word / start-end soft targets for token classification and QA). Every task kind runs every step;
rows are scored with the task's own metrics (``dev_metrics``).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ptmlab.compress.config import CompressConfig  # noqa: F401  (re-exported)
from ptmlab.core.config import config_to_dict
from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry

STEPS: Registry = Registry("compression step")


def parse_step(text: str) -> tuple[str, str | None]:
    name, _, arg = text.partition("=")
    STEPS.get(name.strip())
    return name.strip(), (arg.strip() or None)


@dataclass
class State:
    cfg: CompressConfig
    model: object
    tokenizer: object
    data: object
    work: Path
    onnx: Path | None = None
    info: dict = field(default_factory=dict)
    loss_fn: object = None  # recovery's distillation loss (--distill-alpha), made once before the first change


def _fraction(name: str, arg: str | None) -> float:
    from ptmlab.compress.targets import check_fraction

    try:
        value = float(arg)
    except (TypeError, ValueError):
        raise PtmlabError(f"step '{name}' needs a fraction like {name}=0.4, got '{name}={arg}'") from None
    check_fraction(name, value)
    return value


def _importance(st: State):
    from ptmlab.compress.importance import compute_importance
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import subset

    split = subset(st.data.splits["train"], st.cfg.importance_examples, st.cfg.seed)
    enc = encode_split(st.tokenizer, split, st.cfg.max_length)
    return compute_importance(st.cfg.importance, st.model, enc, st.tokenizer.pad_token_id or 0)


SLICING_STEPS = ("heads", "ffn", "params", "layers", "magnitude")
RECOVERED_STEPS = (*SLICING_STEPS, "lowrank", "share")


def _teacher(st: State) -> None:
    """Before the first structural change: with --distill-alpha, the loss recovery distils the model as it is with."""
    from ptmlab.compress.prune import teacher_loss

    if st.cfg.distill_alpha > 0 and st.cfg.recover_epochs > 0 and st.loss_fn is None:
        st.loss_fn = teacher_loss(st.model, st.data, st.tokenizer, st.cfg)


def _recover(st: State) -> None:
    from ptmlab.compress.prune import recover
    from ptmlab.core.rundir import RunDir

    if st.cfg.recover_epochs > 0:
        n = len(list(st.work.glob("recover-*")))
        run = RunDir(st.work / f"recover-{n}")
        run.path.mkdir(parents=True)
        st.model, summary = recover(st.model, st.tokenizer, st.data, st.cfg, run, st.cfg.recover_epochs, test=False,
                                    loss_fn=st.loss_fn, final=False)
        st.info["recovery_train_examples"] = summary["recovery_train_examples"]


def _structural(st: State, **target) -> None:
    from ptmlab.compress.prune import prune_by_target

    imp = _importance(st)
    _teacher(st)
    st.info.update(prune_by_target(st.model, imp, **target))
    _recover(st)


@STEPS.register("heads", help="remove a fraction of attention heads (heads=0.4)")
def _heads(st: State, arg: str | None) -> None:
    _structural(st, heads=_fraction("heads", arg))


@STEPS.register("ffn", help="remove a fraction of FFN neurons in every layer (ffn=0.3)")
def _ffn(st: State, arg: str | None) -> None:
    _structural(st, ffn=_fraction("ffn", arg))


@STEPS.register("params", help="remove a fraction of all parameters via heads and FFN (params=0.3)")
def _params(st: State, arg: str | None) -> None:
    _structural(st, params=_fraction("params", arg))


@STEPS.register("layers", help="remove whole layers (layers=0+5)")
def _layers(st: State, arg: str | None) -> None:
    try:
        layers = [int(x) for x in (arg or "").split("+")]
    except ValueError:
        raise PtmlabError(f"step 'layers' needs layer numbers like layers=0+5, got 'layers={arg}'") from None
    _structural(st, layers=layers)


@STEPS.register("magnitude", help="zero a fraction of encoder weights by magnitude, globally (magnitude=0.5)")
def _magnitude(st: State, arg: str | None) -> None:
    from ptmlab.compress.magnitude import apply_masks, magnitude_prune, zero_masks

    fraction = _fraction("magnitude", arg)
    _teacher(st)
    info = magnitude_prune(st.model, fraction)
    st.info["magnitude_sparsity"] = info["sparsity_encoder_linear"]
    masks = zero_masks(st.model)
    _recover(st)
    apply_masks(st.model, masks)  # recovery moved pruned weights off zero


@STEPS.register("lowrank", help="truncated-SVD factorisation of encoder Linear layers at a rank ratio (lowrank=0.25)")
def _lowrank(st: State, arg: str | None) -> None:
    from ptmlab.compress.lowrank import low_rank

    try:
        ratio = float(arg)
    except (TypeError, ValueError):
        raise PtmlabError(f"step 'lowrank' needs a rank ratio like lowrank=0.25, got 'lowrank={arg}'") from None
    _teacher(st)
    st.info["lowrank_ranks"] = low_rank(st.model, ratio=ratio)["ranks"]
    _recover(st)


@STEPS.register("share", help="ALBERT-style sharing: tie the layers in G groups of consecutive layers (share=3)")
def _share(st: State, arg: str | None) -> None:
    from ptmlab.compress.sharing import even_groups, share_layers
    from ptmlab.models.structure import structure_of

    try:
        groups = int(arg)
    except (TypeError, ValueError):
        raise PtmlabError(f"step 'share' needs a number of layer groups like share=3, got 'share={arg}'") from None
    _teacher(st)
    share_layers(st.model, even_groups(structure_of(st.model).num_layers(st.model), groups))
    st.info["share_groups"] = groups
    _recover(st)


@STEPS.register("vocab", help="keep only the task corpus' tokens in the vocabulary")
def _vocab(st: State, arg: str | None) -> None:
    from ptmlab.compress.vocab import prune_vocabulary

    texts, pairs = [], []
    for split in st.data.splits.values():
        if st.data.spec.kind == "token-classification":
            texts += [" ".join(words) for words in split.tokens]
        elif st.data.spec.kind == "extractive-qa":
            texts, pairs = texts + list(split.questions), pairs + list(split.contexts)
        else:
            texts += list(split.text)
            if getattr(split, "text_pair", None) is not None:
                pairs += list(split.text_pair)
    st.tokenizer, info = prune_vocabulary(st.model, st.tokenizer, texts, pairs or None)
    st.info.update(info)


@STEPS.register("int8", help="onnxruntime dynamic int8 (ONNX export); must be last")
def _int8(st: State, arg: str | None) -> None:
    from ptmlab.compress.quantize import OrtModel, export_onnx, onnx_int8

    fp = export_onnx(st.model, st.work / "model_fp32.onnx")
    st.onnx = onnx_int8(fp, st.work / "model.onnx")
    st.model = OrtModel(st.onnx, st.model.config)


@STEPS.register("torch-int8", help="torch dynamic int8 of Linear layers (in memory); must be last")
def _torch_int8(st: State, arg: str | None) -> None:
    from ptmlab.compress.quantize import torch_int8

    st.model = torch_int8(st.model)


def _size(st: State, meas) -> float:
    from ptmlab.compress.quantize import int8_state, is_quantized
    from ptmlab.core.io import atomic_save_file

    if st.onnx is not None:
        return round(st.onnx.stat().st_size / 2**20, 2)
    if is_quantized(st.model):
        path = st.work / "int8.safetensors"
        atomic_save_file(int8_state(st.model), path)
        return round(path.stat().st_size / 2**20, 2)
    return meas.saved_size(st.model)


def run_compress(cfg: CompressConfig, source=None) -> list[dict]:
    """Apply ``cfg.steps`` to ``cfg.model``; write the final model, the table and the Pareto plot to ``cfg.output``.
    ``source``: data in memory instead of what ``cfg`` names."""
    from ptmlab.compress.measure import Measurer, write_table_report
    from ptmlab.compress.quantize import check_not_quantized
    from ptmlab.core.rundir import RunDir, check_output_dir
    from ptmlab.core.seed import configure_threads, set_seed
    from ptmlab.data.taskdata import label_names, load_task_data
    from ptmlab.models.loader import save_model
    from ptmlab.models.zoo import load_model, load_tokenizer

    configure_threads()
    check_not_quantized(cfg.model)
    check_output_dir(cfg.output, cfg.overwrite)
    set_seed(cfg.seed)
    data = load_task_data(cfg, source=source)
    tokenizer = load_tokenizer(cfg.model)
    model = load_model(cfg.model, num_labels=data.spec.num_labels, regression=data.spec.kind == "regression",
                       multi_label=data.spec.kind == "multi-label",
                       label_names=label_names(data))
    from ptmlab.compress.ghost import check_no_ghost

    check_no_ghost(model, "compress")
    meas = Measurer(cfg, tokenizer, data=data)
    rows = [meas.row("original", model, meas.saved_size(model), with_metrics=True)]
    with tempfile.TemporaryDirectory(prefix="ptmlab-compress-") as tmp:
        st = State(cfg, model, tokenizer, data, Path(tmp))
        applied = []
        for text in cfg.steps:
            name, arg = parse_step(text)
            print(f"compress step: {text}")
            STEPS.get(name)(st, arg)
            applied.append(text)
            rows.append(meas.row("+".join(applied), st.model, _size(st, meas), tokenizer=st.tokenizer,
                                 with_metrics=True))
        run = RunDir.create(cfg.output, cfg.overwrite)
        run.write_config(config_to_dict(cfg), "compress")
        if st.onnx is not None:
            from ptmlab.compress.quantize import _ConfigOnly

            st.onnx.replace(run.file("model.onnx"))
            save_model(_ConfigOnly(st.model.config), st.tokenizer, run.path)
        elif not any(name == "torch-int8" for name, _ in map(parse_step, cfg.steps)):
            save_model(st.model, st.tokenizer, run.path)
    recovery = (f"soft_ce (alpha {cfg.distill_alpha:g}, T {cfg.distill_temperature:g}) to the model before the first "
                f"structural step" if st.loss_fn is not None else "task loss")
    write_table_report(run, "Compression pipeline", rows, baseline=rows[0],
                       extra={"steps": cfg.steps, "task": data.spec.name, "task_kind": data.spec.kind,
                              "main_metric": data.spec.main_metric, "recovery_loss": recovery, **st.info})
    from ptmlab.report.model_card import write_model_card

    write_model_card(run.path)
    return rows
