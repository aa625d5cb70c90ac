"""Plan a sweep: sizes x budgets x seeds -> ordinary pre-training runs, each costed before anything is written.

Every size is built once with the pre-training engine's own ``prepare`` (which also checks the text, tokenizer,
objective and block size) and costed with its FLOP accounting, so the planned step count of a run is exactly the
one ``run_pretrain`` will take for ``--max-flops BUDGET``. A budget below one optimizer step of a size is a skip
with its reason (reported in the results), and a sweep where every run would be skipped is a one-line error.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import build_config
from ptmlab.core.errors import PtmlabError
from ptmlab.pretrain.config import PretrainConfig
from ptmlab.scaling.config import ScaleConfig, Size

# options every run of a sweep shares; a restart with other values would mix incomparable runs
SHARED_OPTIONS = ("files", "valid_files", "valid_fraction", "doc_sep", "objective", "arch", "tokenizer",
                  "block_size", "batch_size", "lr", "warmup", "schedule", "evals", "eval_blocks", "precision")


@dataclass(frozen=True)
class RunSpec:
    name: str
    size: str
    layers: int
    hidden: int
    heads: int
    ffn: int
    budget: float
    seed: int
    params: int  # non-embedding parameters (the engine's count)
    flops_per_token: float
    tokens_per_step: int
    steps: int  # 0: skipped
    eval_steps: int
    skip: str = ""  # why the run is not trained

    @property
    def flops_per_step(self) -> float:
        return self.flops_per_token * self.tokens_per_step


def run_name(size: Size, budget: float, seed: int) -> str:
    return f"{size.name}-c{budget:.2e}-s{seed}".replace("+", "")


def shared_options(cfg: ScaleConfig) -> dict:
    return {k: getattr(cfg, k) for k in SHARED_OPTIONS}


def pretrain_config(cfg: ScaleConfig | dict, spec: RunSpec, output: str | Path) -> PretrainConfig:
    """The ordinary ``ptmlab pretrain`` config of one run of the sweep."""
    shared = shared_options(cfg) if isinstance(cfg, ScaleConfig) else dict(cfg)
    values = {k: v for k, v in shared.items() if k != "evals"}
    values.update(layers=spec.layers, hidden=spec.hidden, heads=spec.heads, ffn=spec.ffn, seed=spec.seed,
                  max_steps=0, max_tokens=0, max_flops=spec.budget, eval_steps=spec.eval_steps,
                  logging_steps=spec.eval_steps, save_steps=max(spec.eval_steps, spec.steps // 4),
                  output=str(output), overwrite=False)
    return build_config(PretrainConfig, values, source="scale")


def cost_size(cfg: ScaleConfig, size: Size) -> dict:
    """Build ``size`` with the engine's ``prepare`` (every input checked, nothing written) and cost one step."""
    from ptmlab.pretrain.flops import flops_per_token, nonembedding_params
    from ptmlab.pretrain.run import prepare

    probe = RunSpec("probe", size.name, size.layers, size.hidden, size.heads, size.ffn, 1.0, 0, 0, 0.0, 0, 0, 1)
    p = prepare(pretrain_config(cfg, probe, Path(cfg.output) / "probe"))
    pm = p.objective.wrap(p.model)
    return {"flops_per_token": flops_per_token(pm, cfg.block_size), "params": nonembedding_params(pm),
            "tokens_per_step": cfg.batch_size * p.train.blocks.length}


def plan_sweep(cfg: ScaleConfig, costs: dict[str, dict] | None = None) -> list[RunSpec]:
    """Every run of the sweep, smallest size and budget first; ``costs`` (size name -> cost_size) for tests."""
    sizes, budgets, seeds = cfg.parsed_sizes(), cfg.parsed_budgets(), cfg.seed_list()
    costs = dict(costs or {})
    for s in sizes:
        if s.name not in costs:
            costs[s.name] = cost_size(cfg, s)
    sizes.sort(key=lambda s: costs[s.name]["params"])
    runs = []
    for budget in budgets:
        for s in sizes:
            c = costs[s.name]
            per_step = c["flops_per_token"] * c["tokens_per_step"]
            steps = math.floor(budget / per_step)
            skip = "" if steps >= 1 else (f"budget {budget:.3g} is below one step of size {s.name} "
                                          f"({per_step:.3g} FLOPs)")
            for seed in seeds:
                runs.append(RunSpec(run_name(s, budget, seed), s.name, s.layers, s.hidden, s.heads, s.ffn, budget,
                                    seed, int(c["params"]), float(c["flops_per_token"]), int(c["tokens_per_step"]),
                                    max(steps, 0), max(1, steps // cfg.evals), skip))
    if all(r.skip for r in runs):
        small = sizes[0]
        per_step = costs[small.name]["flops_per_token"] * costs[small.name]["tokens_per_step"]
        raise PtmlabError(f"every budget is below one training step of the smallest size {small.name} "
                          f"({per_step:.3g} FLOPs per step): raise --budgets to at least {per_step:.3g}")
    return runs


def spec_from_dict(d: dict) -> RunSpec:
    names = {f.name for f in dataclasses.fields(RunSpec)}
    return RunSpec(**{k: v for k, v in d.items() if k in names})
