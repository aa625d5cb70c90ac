"""Non-transformer students (Q18 point 3): a BiLSTM and a Kim-style CNN on the teacher's tokenizer.

They live inside a BERT sequence-classification shell (zero transformer layers) whose encoder is replaced by
the recurrent or convolutional one. The replacement is a registered model modification, so the student saves
with ``save_model`` (safetensors + config.json) and loads back through ``load_model``/``ptmlab evaluate``.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPooling

from ptmlab.core.errors import PtmlabError
from ptmlab.models.loader import MODIFIERS, record_modification

RNN_KINDS = {"bilstm": {"embed": 0, "hidden": 256}, "cnn": {"embed": 0, "filters": 128}}  # embed 0: teacher width


class RNNEncoder(nn.Module):
    """Embeddings + BiLSTM or CNN, max-pooled over real tokens into a [B, width] sentence vector.

    Module names follow BERT's (``embeddings.word_embeddings``, an empty ``encoder.layer``), so the structure map
    reads it as a BERT with embeddings and zero transformer layers.
    """

    def __init__(self, kind: str, vocab: int, pad_id: int, embed: int, hidden: int = 256, filters: int = 128):
        super().__init__()
        self.kind = kind
        self.embeddings = nn.Module()
        self.embeddings.word_embeddings = nn.Embedding(vocab, embed, padding_idx=pad_id)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList()
        if kind == "bilstm":
            self.rnn = nn.LSTM(embed, hidden, batch_first=True, bidirectional=True)
        else:
            self.convs = nn.ModuleList(nn.Conv1d(embed, filters, k, padding=k // 2) for k in (3, 4, 5))

    def forward(self, input_ids=None, attention_mask=None, **kwargs) -> BaseModelOutputWithPooling:
        mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
        x = self.embeddings.word_embeddings(input_ids)
        if self.kind == "bilstm":
            lengths = mask.sum(-1).clamp_min(1).cpu()
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, _ = self.rnn(packed)
            seq, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        else:
            h = x.transpose(1, 2)
            seq = torch.cat([torch.relu(c(h))[..., : x.shape[1]] for c in self.convs], 1).transpose(1, 2)
        pooled = seq.masked_fill(mask[..., None] == 0, torch.finfo(seq.dtype).min).max(1).values
        return BaseModelOutputWithPooling(last_hidden_state=seq, pooler_output=pooled)


@MODIFIERS.register("rnn_student", help="replace the encoder by a BiLSTM or CNN (non-transformer student)")
def use_rnn_encoder(model, arch: str, embed: int, hidden: int = 256, filters: int = 128,
                    record: bool = True) -> nn.Module:
    """Swap the shell's encoder for an RNNEncoder; its width must equal config.hidden_size (the classifier's input)."""
    c = model.config
    model.bert = RNNEncoder(arch, c.vocab_size, c.pad_token_id or 0, embed, hidden, filters)
    if record:
        record_modification(model, "rnn_student", arch=arch, embed=embed, hidden=hidden, filters=filters)
    return model


def build_rnn_student(kind: str, params: dict[str, int], teacher, num_labels: int, regression: bool,
                      label_names: list[str] | None):
    """A fresh BiLSTM/CNN student; its embeddings start from the teacher's when the widths agree."""
    from transformers import BertConfig, BertForSequenceClassification

    from ptmlab.models.structure import structure_of

    opts = {**RNN_KINDS[kind], **params}
    unknown = set(opts) - set(RNN_KINDS[kind])
    if unknown:
        raise PtmlabError(f"student '{kind}' has no option(s) {sorted(unknown)}: use {sorted(RNN_KINDS[kind])}")
    s = structure_of(teacher)
    t_emb = s.encoder(teacher).get_submodule(s.word_embeddings).weight
    opts["embed"] = opts["embed"] or t_emb.shape[1]
    width = 2 * opts["hidden"] if kind == "bilstm" else 3 * opts["filters"]
    tc = teacher.config
    extra = {"id2label": dict(enumerate(label_names)), "label2id": {n: i for i, n in enumerate(label_names)}} \
        if label_names else {}
    config = BertConfig(vocab_size=tc.vocab_size, hidden_size=width, num_hidden_layers=0, num_attention_heads=1,
                        intermediate_size=4, pad_token_id=getattr(tc, "pad_token_id", 0) or 0, num_labels=num_labels,
                        problem_type="regression" if regression else "single_label_classification",
                        classifier_dropout=0.1, **extra)
    config.ptmlab_rnn = kind
    model = BertForSequenceClassification(config)
    use_rnn_encoder(model, kind, **opts)
    if t_emb.shape[1] == opts["embed"]:
        with torch.no_grad():
            model.bert.embeddings.word_embeddings.weight.copy_(t_emb)
    return model
