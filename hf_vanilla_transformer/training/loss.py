"""The training loss of the translation trainer: the model's `token_cross_entropy` in value and gradient, computed in
float32 one chunk of rows at a time, so that no float32 copy of all the logits exists."""

import torch

from ..model.modeling_vanilla_transformer import targets_count


LOSS_CHUNK_ROWS = 2048  # rows of logits per float32 chunk of the loss


class ChunkedCrossEntropy(torch.autograd.Function):
    """`nn.functional.cross_entropy(logits.float(), labels, reduction="sum", label_smoothing=...)`, in float32 one
    chunk of rows at a time: a float32 copy of all (n, v) logits, its log-softmax and their gradients would take
    several times the memory of the logits themselves. The forward keeps each row's logsumexp; the backward
    recomputes the softmax chunk by chunk and writes the gradient in the logits' dtype."""

    @staticmethod
    def forward(ctx, logits, labels, smoothing):  # (n, v), (n,) with -100 where there is no target
        keep, targets = labels != -100, labels.clamp(min=0)[:, None]
        lse = logits.new_empty(len(labels), dtype=torch.float32)
        losses = torch.empty_like(lse)
        for rows in (slice(i, i + LOSS_CHUNK_ROWS) for i in range(0, len(labels), LOSS_CHUNK_ROWS)):
            z = logits[rows].float()
            lse[rows] = z.logsumexp(-1)
            nll, smooth = lse[rows] - z.gather(-1, targets[rows]).squeeze(-1), lse[rows] - z.mean(-1)
            losses[rows] = (1 - smoothing) * nll + smoothing * smooth
        ctx.save_for_backward(logits, keep, targets, lse)
        ctx.smoothing = smoothing
        return torch.where(keep, losses, 0.0).sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):  # softmax(z) - (1 - smoothing) * onehot(label) - smoothing / v, 0 without a target
        logits, keep, targets, lse = ctx.saved_tensors
        grad_logits, scale, smoothing = torch.empty_like(logits), (grad * keep)[:, None], ctx.smoothing
        for rows in (slice(i, i + LOSS_CHUNK_ROWS) for i in range(0, len(targets), LOSS_CHUNK_ROWS)):
            p = (logits[rows] - lse[rows, None]).exp_()  # float32: the softmax
            p.scatter_add_(-1, targets[rows], p.new_full(targets[rows].shape, smoothing - 1))
            torch.addcmul(scale[rows] * (-smoothing / logits.shape[-1]), p, scale[rows], out=grad_logits[rows])
        return grad_logits, None, None


def chunked_token_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch=None, label_smoothing: float = 0.0
) -> torch.Tensor:
    """(..., v) logits and (...) labels, -100 where there is no target -> the model's `token_cross_entropy`: label
    smoothed, summed over the targets and divided by `num_items_in_batch`, else by their count (at least 1)."""
    labels = labels.flatten().to(logits.device)
    loss = ChunkedCrossEntropy.apply(logits.reshape(-1, logits.shape[-1]), labels, label_smoothing)
    return loss / targets_count(labels, num_items_in_batch)
