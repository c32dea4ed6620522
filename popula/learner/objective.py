"""The policy-gradient objective, token by token (pure tensor functions).

Per completion token t of a rollout with advantage A, trainer log-prob logp_t and
sampler log-prob old_t (the policy that drew the token):

    ratio_t = exp(logp_t - old_t)
    pg_t    = -min(ratio_t * A, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A)      (PPO)
    kl_t    = exp(base_t - logp_t) - (base_t - logp_t) - 1                        (k3, >= 0)
    H_t     = -sum_v p(v) log p(v)       (the whole next-token distribution at the sampler's T)
    loss_t  = pg_t + kl_coef * kl_t - entropy_coef * H_t

On-policy with one epoch the ratio is 1 up to numerics and the gradient is REINFORCE's,
A * grad logp_t; the clip matters once epochs > 1 or samples come from an older adapter
version. The k3 estimator (Schulman, "Approximating KL divergence") is unbiased for
KL(pi || base) and never negative, unlike the plain log-ratio. The entropy bonus is the exact
entropy of each position's distribution, not the sampled token's -log p: the gradient of the
latter is zero in expectation, so it could not hold a policy's spread.

With truncated importance sampling (`is_cap` C, the default), the ratio is taken to the
learner's own log-probs before this step's update, old_t (the detached logp_t in the first
epoch), and each token is weighted by how much likelier the learner finds it than the
sampler did, truncated:

    w_t     = min(exp(old_t - sampler_t), C)                      (no gradient)
    loss_t  = w_t * pg_t(ratio_t = exp(logp_t - old_t)) + kl_coef * kl_t

Why: a sampler that computes the same policy slightly differently (bf16 kernels, vLLM) is a
behaviour policy of its own. Its numeric gap is importance-weighted (bounded by C, so a rare
token the sampler under-rated cannot dominate) instead of being read as policy movement:
with the ratio to the sampler, the PPO clip zeroes the gradient of any token whose
numerics drift past 1 +- eps. Samples from an older adapter version are corrected the same
way. In float32 with one epoch both forms give the same gradient to rounding (w_t is the
old ratio and ratio_t is 1). This is the token-level TIS of TRL and verl.

How tokens are averaged is the learner's job (see `popula.learner.learner`): over every
token an adapter produced in the step, not per sequence first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: torch.Tensor | float) -> torch.Tensor:
    """log softmax(logits / temperature)[target], in float32: the sampler's tempered policy.

    logits (..., V), targets (...), temperature broadcastable to targets.
    """
    scaled = logits.float() / torch.as_tensor(temperature, dtype=torch.float32, device=logits.device).unsqueeze(-1)
    picked = scaled.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(scaled, dim=-1)


def token_entropy(logits: torch.Tensor, temperature: torch.Tensor | float) -> torch.Tensor:
    """The entropy of softmax(logits / temperature) per position, in float32 (logits (..., V))."""
    scaled = logits.float() / torch.as_tensor(temperature, dtype=torch.float32, device=logits.device).unsqueeze(-1)
    logp = torch.log_softmax(scaled, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def selected_logprobs(hidden: torch.Tensor, head: torch.nn.Linear, targets: torch.Tensor, temperature: torch.Tensor,
                      chunk: int, *, entropy: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`token_logprobs(head(hidden), targets, temperature)` without the (N, V) float32 logits at once;
    with `entropy`, also `token_entropy(head(hidden), temperature)`, as (logp, entropy).

    hidden (N, H) final hidden states of the positions that predict `targets` (N,); temperature
    (N,). The LM head runs `chunk` positions at a time. For the backward, each position's
    gradient of its log-prob with respect to its hidden state, (onehot - softmax) / T @ W, is
    kept while the chunk's logits are at hand: (N, H) numbers instead of the (N, V) logits
    autograd would keep (and the entropy's, -p (log p + H) / T @ W, likewise). The head must be
    frozen (the learner never trains it).
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if head.weight.requires_grad:
        raise ValueError("selected_logprobs gives no gradient to the LM head; it must be frozen")
    want_grad = torch.is_grad_enabled() and hidden.requires_grad
    logp, ent = _SelectedLogprobs.apply(hidden, head.weight, head.bias, targets, temperature.float(), chunk,
                                        want_grad, entropy)
    return (logp, ent) if entropy else logp


class _SelectedLogprobs(torch.autograd.Function):
    """The chunked log-probs (and entropies) of `selected_logprobs`, their hidden-state gradients kept per position."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk, want_grad, want_entropy):  # type: ignore[override]
        n = hidden.shape[0]
        out = torch.empty(n, dtype=torch.float32, device=hidden.device)
        ent = torch.empty(n if want_entropy else 0, dtype=torch.float32, device=hidden.device)
        jacobian = torch.empty_like(hidden) if want_grad else None
        ent_jacobian = torch.empty_like(hidden) if want_grad and want_entropy else None
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            temp = temperature[start:end].unsqueeze(-1)
            scaled = torch.nn.functional.linear(hidden[start:end], weight, bias).float() / temp
            picked = targets[start:end].unsqueeze(-1)
            lse = torch.logsumexp(scaled, dim=-1, keepdim=True)
            out[start:end] = (scaled.gather(-1, picked) - lse).squeeze(-1)
            if not want_entropy and jacobian is None:
                continue
            logp = scaled.sub_(lse)  # the whole distribution's log-probs, once for both uses
            probs = logp.exp()
            if want_entropy:
                h = -(probs * logp).sum(-1, keepdim=True)
                ent[start:end] = h.squeeze(-1)
                if ent_jacobian is not None:  # d H / d logits = -p (log p + H) / T, then through the head
                    ent_jacobian[start:end] = (-(probs * (logp + h)) / temp).to(weight.dtype) @ weight
            if jacobian is not None:  # d logp / d logits = (onehot - softmax) / T, then through the head
                grad = probs.neg_()
                grad.scatter_add_(-1, picked, torch.ones_like(picked, dtype=grad.dtype))
                jacobian[start:end] = (grad / temp).to(weight.dtype) @ weight
        ctx.save_for_backward(jacobian, ent_jacobian)
        if not want_entropy:
            ctx.mark_non_differentiable(ent)
        return out, ent

    @staticmethod
    def backward(ctx, grad_out, grad_ent):  # type: ignore[override]
        jacobian, ent_jacobian = ctx.saved_tensors
        grad = grad_out.unsqueeze(-1).to(jacobian.dtype) * jacobian
        if ent_jacobian is not None and grad_ent is not None:
            grad = grad + grad_ent.unsqueeze(-1).to(ent_jacobian.dtype) * ent_jacobian
        return grad, None, None, None, None, None, None, None


def k3_kl(logp: torch.Tensor, base_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(policy || base) from the sampled tokens' log-probs."""
    log_ratio = base_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


@dataclass
class TokenLoss:
    loss: torch.Tensor  # (N,) per-token loss
    clipped: torch.Tensor  # (N,) bool: the clip is active, so the token gives no gradient
    kl: torch.Tensor | None  # (N,) per-token k3 KL, when a base log-prob was given
    truncated: torch.Tensor | None = None  # (N,) bool: the importance weight hit its cap (with is_cap)
    entropy: torch.Tensor | None = None  # (N,) per-token policy entropy, when one was given


def clipped_token_loss(logp: torch.Tensor, sampler_logp: torch.Tensor, advantages: torch.Tensor, *,
                       clip_low: float, clip_high: float, base_logp: torch.Tensor | None = None,
                       kl_coef: float | torch.Tensor = 0.0, is_cap: float | None = None,
                       old_logp: torch.Tensor | None = None, entropy: torch.Tensor | None = None,
                       entropy_coef: float | torch.Tensor = 0.0) -> TokenLoss:
    """PPO's clipped surrogate (negated, to minimise), an optional k3 KL penalty and an optional
    entropy bonus (`entropy`: the policy's entropy per token), per token.

    `is_cap` None: the ratio is to the sampler's log-probs. A number: truncated importance
    sampling, the ratio to `old_logp` (the learner's log-probs before the update; None: the
    detached `logp`) and each token weighted by min(exp(old - sampler), is_cap).
    """
    weight = truncated = None
    if is_cap is not None:
        old = logp.detach() if old_logp is None else old_logp
        raw = torch.exp(old - sampler_logp)
        weight, truncated = raw.clamp(max=is_cap), raw > is_cap
        sampler_logp = old
    ratio = torch.exp(logp - sampler_logp)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    if weight is not None:
        loss = weight * loss
    is_clipped = ((advantages > 0) & (ratio > 1.0 + clip_high)) | ((advantages < 0) & (ratio < 1.0 - clip_low))
    kl = None
    if base_logp is not None:
        kl = k3_kl(logp, base_logp)
        # One coefficient, or one per row (by role); a coefficient of 0 adds nothing, not 0 * inf.
        loss = loss + torch.where(torch.as_tensor(kl_coef) > 0, kl_coef * kl, 0.0)
    if entropy is not None:
        loss = loss - torch.where(torch.as_tensor(entropy_coef) > 0, entropy_coef * entropy, 0.0)
    return TokenLoss(loss, is_clipped, kl, truncated, entropy)
