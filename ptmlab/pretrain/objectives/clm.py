"""Causal (left-to-right) language modelling, GPT-2 style (Radford et al. 2019, "Language Models are
Unsupervised Multitask Learners", §2): every token of a packed block is predicted from the tokens before it;
documents are joined by the end-of-text token. Nothing is corrupted, so a block is all content.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ptmlab.pretrain.objectives.base import OBJECTIVES, Objective, PretrainModel, stack


class CausalLM(Objective):
    name = "clm"
    arch_kind = "decoder"
    head = "clm"
    default_arch = "gpt2"

    def content_length(self, block_size: int) -> int:
        return block_size

    def make_batch(self, blocks, rngs, *, source=None, indices=None) -> dict[str, torch.Tensor]:
        ids = stack(blocks)
        return {"input_ids": ids, "labels": ids.clone()}

    def forward(self, pm: PretrainModel, batch: dict) -> torch.Tensor:
        model = pm.model
        ids = batch["input_ids"]
        hidden = getattr(model, model.base_model_prefix)(input_ids=ids, use_cache=False).last_hidden_state
        logits = model.get_output_embeddings()(hidden[:, :-1]).float()
        ce = F.cross_entropy(logits.flatten(0, 1), batch["labels"][:, 1:].flatten(), reduction="none")
        return ce.view(ids.shape[0], -1).mean(-1)


OBJECTIVES.add("clm", CausalLM, "GPT-2 causal language modelling (next token, left to right)")
