"""Greedy and beam search that drop each sentence from the batch once its result is final.

`generate()` keeps computing every row of a batch until the last sentence ends: in a length-sorted batch of the
translate command, the sentences whose translations are short wait, at full cost, for the longest one (some 40% of
the decoder's work on the bundled test split). Here a sentence leaves the batch, with its rows of the key/value
cache, the encoder states and the source mask, at the step after which `generate()` could no longer change it. The
search itself is transformers' (5.x `_beam_search`: the 2 x num_beams best continuations, the finished hypotheses
scored by length ** length_penalty, `early_stopping`), step for step in the same tensor operations, so its choices are
`generate()`'s; only the rows that share a matrix product change, as between two batchings of the same sentences.

It covers the deterministic settings translation uses: greedy or beam search, per-sentence length limits, n-best,
and bans of single tokens (`bad_words_ids`, as OPUS-MT models ban <pad>). `supported()` says whether a generation
config needs nothing else; otherwise the backend calls `generate()`.
"""

import torch
from transformers import GenerationConfig

from ..data.trained_on import FIELD


# Generation settings that change nothing here, or that this module applies itself.
HANDLED = {
    "num_beams",
    "length_penalty",
    "early_stopping",
    "max_length",
    "max_new_tokens",
    "num_return_sequences",
    "do_sample",
    "bad_words_ids",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "decoder_start_token_id",
    "use_cache",
    "return_dict_in_generate",
    "output_scores",
    "output_logits",
    "output_attentions",
    "output_hidden_states",
    "transformers_version",
    FIELD,
    # Sampling settings, unused without do_sample.
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
}
_NEG = -1.0e9  # transformers' mask value in beam search, kept for the same arithmetic


def supported(model, generation_config: GenerationConfig) -> bool:
    """Whether `decode` gives what `generate()` gives for this model and config."""
    differing = set(generation_config.to_diff_dict()) - HANDLED
    bans = generation_config.bad_words_ids or []
    return (
        model.config.is_encoder_decoder
        and generation_config.decoder_start_token_id is not None
        and not generation_config.do_sample
        and not differing
        and all(len(ids) == 1 for ids in bans)
    )


@torch.inference_mode()
def decode(model, input_ids, attention_mask, limits: list[int], generation_config: GenerationConfig, nbest: int):
    """Per source row, its `nbest` hypotheses as (generated ids, their log-probabilities), best first, the end token
    included where the model ended them; sentence i stops after `limits[i]` new tokens."""
    device = input_ids.device
    search = _Search(
        model,
        model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask, return_dict=True),
        attention_mask,
        generation_config.num_beams or 1,
        [ids[0] for ids in generation_config.bad_words_ids or []],
    )
    eos = torch.tensor(_ids(generation_config.eos_token_id), device=device)
    limits = torch.tensor(limits, device=device)
    start = torch.full((input_ids.shape[0],), generation_config.decoder_start_token_id, device=device)
    if search.num_beams == 1:
        return _greedy(search, start, eos, limits)
    return _beam_search(search, start, eos, limits, generation_config, nbest)


def _ids(value) -> list[int]:
    return [] if value is None else value if isinstance(value, list) else [value]


def _rows(outputs, select):
    """`outputs` (a `ModelOutput` of batch-first tensors) with `select` applied to each of its tensors."""
    return type(outputs)(**{name: select(value) for name, value in outputs.items()})


class _Search:
    """The sentences still decoding: their encoder output, source masks and key/value cache, num_beams rows each.

    The encoder output is kept as the encoder returned it (for this package's model it also carries what the decoder
    needs of the source mask, found once), its tensors cut to the rows still decoding."""

    def __init__(self, model, encoder_outputs, attention_mask, num_beams: int, banned: list[int]):
        self.model, self.num_beams, self.banned, self.cache = model, num_beams, banned, None
        self.encoder_outputs = _rows(encoder_outputs, lambda tensor: tensor.repeat_interleave(num_beams, dim=0))
        self.attention_mask = attention_mask.repeat_interleave(num_beams, dim=0)
        self.sentences = torch.arange(attention_mask.shape[0], device=attention_mask.device)  # their input rows

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """(rows, vocab) float32 logits of the next token after `tokens` (rows,)."""
        outputs = self.model(
            encoder_outputs=self.encoder_outputs,
            attention_mask=self.attention_mask,
            decoder_input_ids=tokens[:, None],
            past_key_values=self.cache,
            use_cache=True,
            return_dict=True,
        )
        self.cache = outputs.past_key_values
        return outputs.logits[:, -1, :].to(dtype=torch.float32)

    def ban(self, scores: torch.Tensor) -> torch.Tensor:
        if self.banned:
            scores[:, self.banned] = -float("inf")
        return scores

    def keep(self, sentences: torch.Tensor) -> torch.Tensor:
        """Go on with these sentences (indices into the current ones) only; returns them for indexing other state."""
        rows = (sentences[:, None] * self.num_beams + torch.arange(self.num_beams, device=sentences.device)).view(-1)
        self.cache.reorder_cache(rows)
        self.encoder_outputs = _rows(self.encoder_outputs, lambda tensor: tensor.index_select(0, rows))
        self.attention_mask = self.attention_mask.index_select(0, rows)
        self.sentences = self.sentences[sentences]
        return sentences


def _greedy(search: _Search, tokens, eos, limits):
    b, device = tokens.shape[0], tokens.device
    generated = torch.zeros((b, int(limits.max())), dtype=torch.long, device=device)
    generated_scores = torch.zeros(generated.shape, device=device)
    results = [None] * b
    step = 0
    while b:
        logits = search.ban(search.logits(tokens))
        tokens = logits.argmax(-1)  # generate()'s greedy choice, on the processed logits
        generated[:, step] = tokens
        generated_scores[:, step] = logits.log_softmax(-1).gather(1, tokens[:, None]).squeeze(1)
        step += 1
        done = torch.isin(tokens, eos) | (step >= limits)  # the stopping criteria
        if done.any():
            sentences = search.sentences.tolist()
            for i in done.nonzero().squeeze(1).tolist():
                results[sentences[i]] = [(generated[i, :step].tolist(), generated_scores[i, :step].tolist())]
            keep = search.keep((~done).nonzero().squeeze(1))
            tokens, limits, generated, generated_scores = (
                tokens[keep],
                limits[keep],
                generated[keep],
                generated_scores[keep],
            )
            b = keep.numel()
    return results


def _beam_search(search: _Search, start, eos, limits, config: GenerationConfig, nbest: int):
    """transformers' beam search (5.x `GenerationMixin._beam_search` and its helpers), with finished sentences
    leaving the batch. Shapes: b sentences still decoding, k beams, K candidates kept per step, T positions."""
    b, k, device = start.shape[0], search.num_beams, start.device
    K = max(2, 1 + eos.numel()) * k
    length_penalty = 1.0 if config.length_penalty is None else config.length_penalty
    early_stopping = config.early_stopping
    T = int(limits.max()) + 1  # generate()'s max_length: the decoder start token and the longest limit
    top_k_mask = torch.arange(K, device=device) < k  # only the k best candidates may finish
    running = torch.zeros((b, k, T), dtype=torch.long, device=device)
    running[:, :, 0] = start[:, None]
    running_scores = torch.zeros((b, k), device=device)
    running_scores[:, 1:] = _NEG
    running_token_scores = torch.zeros((b, k, T - 1), device=device)
    finished, finished_token_scores = running.clone(), running_token_scores.clone()
    finished_scores = torch.full((b, k), _NEG, device=device)
    finished_lengths = torch.zeros((b, k), dtype=torch.long, device=device)
    is_finished = torch.zeros((b, k), dtype=torch.bool, device=device)
    can_improve = torch.ones((b, 1), dtype=torch.bool, device=device)
    results = [None] * b
    length = 1  # tokens so far, the decoder start token included (generate()'s cur_len)
    while b:
        log_probs = search.ban(search.logits(running[:, :, length - 1].reshape(-1)).log_softmax(-1))  # (b*k, V)
        vocab = log_probs.shape[-1]
        log_probs = log_probs.view(b, k * vocab)
        top_scores, top_indices = torch.topk((log_probs.view(b, k, vocab) + running_scores[:, :, None]).view(b, -1), K)
        beams = top_indices // vocab  # (b, K)
        candidates = torch.take_along_dim(running, beams[:, :, None], dim=1)
        candidates[:, :, length] = top_indices % vocab
        candidate_token_scores = torch.take_along_dim(running_token_scores, beams[:, :, None], dim=1)
        candidate_token_scores[:, :, length - 1] = log_probs.gather(1, top_indices)
        hits = torch.isin(candidates[:, :, length], eos) | (length >= limits[:, None])  # the stopping criteria

        # The k best candidates that go on.
        running_candidate_scores = top_scores + hits.to(torch.float32) * _NEG
        following = torch.topk(running_candidate_scores, k=k)[1]
        running = torch.take_along_dim(candidates, following[:, :, None], dim=1)
        running_scores = torch.take_along_dim(running_candidate_scores, following, dim=1)
        running_token_scores = torch.take_along_dim(candidate_token_scores, following[:, :, None], dim=1)
        rows = torch.take_along_dim(beams, following, dim=1) + torch.arange(b, device=device)[:, None] * k

        # The k best finished hypotheses.
        just_finished = hits & top_k_mask[None, :]
        scores = top_scores / (length**length_penalty)
        scores += (is_finished.all(-1, keepdim=True) & (early_stopping is True)).to(torch.float32) * _NEG
        scores += (~can_improve).to(torch.float32) * _NEG
        scores += (~just_finished) * _NEG
        best = torch.topk(torch.cat((finished_scores, scores), dim=1), k=k)[1]
        finished = torch.take_along_dim(torch.cat((finished, candidates), dim=1), best[:, :, None], dim=1)
        finished_token_scores = torch.take_along_dim(
            torch.cat((finished_token_scores, candidate_token_scores), dim=1), best[:, :, None], dim=1
        )
        finished_scores = torch.take_along_dim(torch.cat((finished_scores, scores), dim=1), best, dim=1)
        lengths = torch.full((b, K), length, dtype=torch.long, device=device)
        finished_lengths = torch.take_along_dim(torch.cat((finished_lengths, lengths), dim=1), best, dim=1)
        is_finished = torch.take_along_dim(torch.cat((is_finished, just_finished), dim=1), best, dim=1)

        search.cache.reorder_cache(rows.view(-1))
        length += 1
        hypothetical = T - 1 if early_stopping == "never" and length_penalty > 0.0 else length - 1
        best_running = running_scores[:, :1] / (hypothetical**length_penalty)
        worst_finished = torch.where(is_finished, finished_scores.min(dim=1, keepdim=True)[0], _NEG)
        can_improve = can_improve & (best_running > worst_finished).any(-1, keepdim=True)

        # A sentence that can take no other finished hypothesis is done: generate() would not change it again.
        done = ~can_improve[:, 0] | (is_finished.all(-1) & (early_stopping is True)) | hits.all()
        if done.any():
            sentences = search.sentences.tolist()
            for i in done.nonzero().squeeze(1).tolist():
                ids, token_scores, n = (
                    finished[i, :nbest, 1:].tolist(),
                    finished_token_scores[i, :nbest].tolist(),
                    finished_lengths[i, :nbest].tolist(),
                )
                results[sentences[i]] = [(h[:m], s[:m]) for h, s, m in zip(ids, token_scores, n)]
            keep = search.keep((~done).nonzero().squeeze(1))
            running, running_scores, running_token_scores = (
                running[keep],
                running_scores[keep],
                running_token_scores[keep],
            )
            finished, finished_token_scores = finished[keep], finished_token_scores[keep]
            finished_scores, finished_lengths, is_finished = (
                finished_scores[keep],
                finished_lengths[keep],
                is_finished[keep],
            )
            can_improve, limits = can_improve[keep], limits[keep]
            b = keep.numel()
    return results
