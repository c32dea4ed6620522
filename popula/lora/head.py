"""The LM head for a few rows on a CPU: the weight on the left of the product.

Why: decoding asks the head for one position of a few live rows at a time, and the head is
the base's largest matrix (SmolLM2-135M: 49152 x 576, a fifth of its weights). For such a
product `x @ W.T`, torch's CPU matmul packs the whole weight before multiplying, once per
call; `(W @ x.T).T` packs only the few rows of `x`. Same sum per logit, in another order
(logits agree to about 1e-5), 2-4x less time for 2-4 rows (1.25x at 8), and 1.1-1.2x less
for a whole SmolLM2 decode of 2-4 rows (docs/results/step-cost). Gradients, other devices and larger
batches (where packing pays off) take `nn.Linear`'s own path, so training is untouched.
"""

from __future__ import annotations

import torch
from torch import nn

FEW_ROWS = 8  # at most this many positions take the weight-first product (measured: 12 is slower)


class FewRowsHead(nn.Linear):
    """An `nn.Linear` head that computes few rows on a CPU, without autograd, as `(W @ x.T).T`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if x.device.type != "cpu" or torch.is_grad_enabled() or rows > FEW_ROWS or rows == 0:
            return super().forward(x)
        out = torch.mm(self.weight, x.reshape(rows, x.shape[-1]).t()).t()
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


def use_few_rows_head(model: nn.Module) -> None:
    """Give `model` a `FewRowsHead` holding its output embedding's very Parameters (a tied
    embedding stays tied); a model whose head is not a plain `nn.Linear` is left as it is."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is not nn.Linear:
        return
    few = FewRowsHead(head.in_features, head.out_features, bias=head.bias is not None, device="meta")
    few.weight = head.weight
    if head.bias is not None:
        few.bias = head.bias
    model.set_output_embeddings(few)
