"""Lexically constrained beam search: the hypotheses of a sentence end only once they hold each of its target terms
(token sequences), with dynamic beam allocation (Post and Vilar, 2018; fairseq's `--constraints`).

A hypothesis' state is the terms it has completed and the one it is in the middle of (the term and how many of its
tokens it has produced); a token that breaks a term off loses that term's progress (it may start another). At each
step a sentence's candidates are the 2k best continuations of its k hypotheses, each hypothesis' best token, and each
hypothesis' tokens that advance a term (the next token of its term in progress, or the first of any term it lacks).
The k that go on are taken from banks by progress (term tokens produced) in turn, the best of each bank first, so that
hypotheses that hold more of the terms are not crowded out by likelier ones that hold fewer. The end token is barred
while a term is missing; a hypothesis that has no more room than its missing tokens (the sentence's length limit) may
only take a token that advances a term, so every hypothesis holds every term when it ends, where the terms fit within
the limit. One that does not fit ends at the limit without the terms, ranked after those that hold them.

A sentence is done once it has k finished hypotheses that hold every term, or at its length limit; its n best are
ranked by score / length ** length_penalty, as beam search ranks them.
"""

from dataclasses import dataclass

import torch
from transformers import GenerationConfig

from ..data.trained_on import token_ids
from .decoding import NEG, Search


MIN_BEAMS = 4  # the banks need room: a constrained search keeps at least this many hypotheses, greedy search too


@dataclass(frozen=True)
class State:
    """Which of a sentence's terms a hypothesis holds, and the one it is in the middle of: (term, tokens produced)."""

    met: frozenset = frozenset()
    partial: tuple[int, int] | None = None

    def advance(self, token: int, terms: list[list[int]]) -> "State":
        if self.partial is not None:
            j, p = self.partial
            if terms[j][p] == token:
                return State(self.met | {j}) if p + 1 == len(terms[j]) else State(self.met, (j, p + 1))
        for j, term in enumerate(terms):
            if j not in self.met and term[0] == token:
                return State(self.met | {j}) if len(term) == 1 else State(self.met, (j, 1))
        return State(self.met)

    def progress(self, terms: list[list[int]]) -> int:
        """Term tokens produced: the bank."""
        return sum(len(terms[j]) for j in self.met) + (self.partial[1] if self.partial else 0)

    def advancing(self, terms: list[list[int]]) -> set[int]:
        """The tokens that advance a term."""
        if self.partial is not None:
            j, p = self.partial
            return {terms[j][p]}
        return {term[0] for j, term in enumerate(terms) if j not in self.met}


def holds(ids: list[int], term: list[int]) -> bool:
    """Whether `term` occurs in `ids` as a contiguous run."""
    n = len(term)
    return any(ids[i : i + n] == term for i in range(len(ids) - n + 1))


@torch.inference_mode()
def decode_constrained(
    model,
    input_ids,
    attention_mask,
    limits: list[int],
    generation_config: GenerationConfig,
    nbest: int,
    terms: list[list[list[int]]],
    candidates: list[int] | None = None,
):
    """Per source row, its `nbest` hypotheses as (generated ids, their log-probabilities), each holding every token
    sequence of `terms[row]` where they fit within `limits[row]` new tokens (see the module's docstring).
    `candidates`: a vocabulary map's sorted token ids, to which the terms' tokens are added."""
    # A term that another one holds is held with it ("station" in "railway station").
    terms = [[t for t in row if not any(u != t and holds(u, t) for u in row)] for row in terms]
    if candidates is not None:
        candidates = sorted(set(candidates) | {i for row in terms for term in row for i in term})
        position = {token: i for i, token in enumerate(candidates)}
        terms = [[[position[i] for i in term] for term in row] for row in terms]
    beams = max(generation_config.num_beams or 1, MIN_BEAMS, nbest)
    search = Search.of(model, input_ids, attention_mask, generation_config, beams, candidates)
    config = search.config
    start = torch.full((len(limits),), config.decoder_start_token_id, device=input_ids.device)
    results = _search(search, start, set(token_ids(config.eos_token_id)), limits, config, nbest, terms)
    return search.token_ids(results)


def _search(search: Search, start, eos: set[int], limits: list[int], config, nbest: int, terms):
    b, k, device = start.shape[0], search.num_beams, start.device
    length_penalty = 1.0 if config.length_penalty is None else config.length_penalty
    T = max(limits) + 1
    running = torch.zeros((b, k, T), dtype=torch.long, device=device)
    running[:, :, 0] = start[:, None]
    running_scores = torch.full((b, k), NEG, device=device)
    running_scores[:, 0] = 0.0  # the k beams start as one hypothesis
    token_scores = torch.zeros((b, k, T - 1), device=device)
    states = [[State()] * k for _ in range(b)]
    finished = [[] for _ in range(b)]  # (rank, holds every term, ids, token scores)
    results = [None] * b
    eos_ids = sorted(eos)
    length = 1
    while b:
        log_probs = search.logits(running[:, :, length - 1].reshape(-1)).log_softmax(-1)
        at_limit = torch.tensor([length >= limit for limit in limits], device=device).repeat_interleave(k)
        log_probs = search.process(running[:, :, :length].reshape(b * k, length), log_probs, length - 1, at_limit)
        vocab = log_probs.shape[-1]
        total = (log_probs + running_scores.view(-1, 1)).view(b, k, vocab)
        # The end token waits for the terms; a hypothesis without room to spare takes a token that advances a term.
        for i in range(b):
            room = limits[i] - length + 1  # tokens it may still produce, this one included
            for h, state in enumerate(states[i]):
                missing = sum(map(len, terms[i])) - state.progress(terms[i])
                if missing and room > 1:
                    total[i, h, eos_ids] = NEG
                if 0 < missing and missing >= room:
                    keep = total[i, h, sorted(state.advancing(terms[i]))].clone()
                    total[i, h] = NEG
                    total[i, h, sorted(state.advancing(terms[i]))] = keep
        top_scores, top_indices = total.view(b, -1).topk(2 * k)
        best_tokens = total.argmax(-1)
        chosen_beams, chosen_tokens, chosen_scores, chosen_token_scores, done = [], [], [], [], []
        top_scores, top_indices, best_tokens = top_scores.tolist(), top_indices.tolist(), best_tokens.tolist()
        previous = running_scores.tolist()
        for i in range(b):
            pairs = {(index // vocab, index % vocab) for index in top_indices[i]}
            for h, state in enumerate(states[i]):
                if previous[i][h] > NEG / 2:
                    pairs.add((h, best_tokens[i][h]))
                    pairs.update((h, t) for t in state.advancing(terms[i]))
            pairs = sorted(pairs)
            rows, tokens = zip(*pairs)
            scores = total[i][list(rows), list(tokens)].tolist()
            pool = []
            for (h, t), score in zip(pairs, scores):
                if score <= NEG / 2:
                    continue
                state = states[i][h].advance(t, terms[i])
                ends = t in eos or length >= limits[i]
                if ends:
                    complete = state.progress(terms[i]) == sum(map(len, terms[i]))
                    ids = running[i, h, 1:length].tolist() + [t]
                    scores_so_far = token_scores[i, h, : length - 1].tolist() + [score - previous[i][h]]
                    finished[i].append((score / length**length_penalty, complete, ids, scores_so_far))
                else:
                    pool.append((score, state.progress(terms[i]), h, t, state))
            # Banks in turn, the best of each first: (rank within its bank, bank from the most progress down).
            pool.sort(key=lambda c: (-c[1], -c[0]))
            rank, bank, ordered = 0, None, []
            for candidate in pool:
                rank = rank + 1 if candidate[1] == bank else 0
                bank = candidate[1]
                ordered.append((rank, -candidate[1], candidate))
            kept = [c for _, _, c in sorted(ordered, key=lambda r: (r[0], r[1], -r[2][0]))[:k]]
            kept += [(NEG, 0, 0, eos_ids[0], State())] * (k - len(kept))  # dead rows: no candidate left
            chosen_beams.append([c[2] for c in kept])
            chosen_tokens.append([c[3] for c in kept])
            chosen_scores.append([c[0] for c in kept])
            chosen_token_scores.append([c[0] - previous[i][c[2]] if c[0] > NEG / 2 else 0.0 for c in kept])
            states[i] = [c[4] for c in kept]
            holding = sum(complete for _, complete, _, _ in finished[i])
            done.append(holding >= k or length >= limits[i] or all(c[0] <= NEG / 2 for c in kept))
        beams = torch.tensor(chosen_beams, device=device)
        running = torch.take_along_dim(running, beams[:, :, None], dim=1)
        running[:, :, length] = torch.tensor(chosen_tokens, device=device)
        token_scores = torch.take_along_dim(token_scores, beams[:, :, None], dim=1)
        token_scores[:, :, length - 1] = torch.tensor(chosen_token_scores, device=device)
        running_scores = torch.tensor(chosen_scores, device=device)
        search.follow((beams + torch.arange(b, device=device)[:, None] * k).view(-1))
        length += 1
        if any(done):
            sentences = search.sentences.tolist()
            for i in (i for i, d in enumerate(done) if d):
                ranked = sorted(finished[i], key=lambda f: (not f[1], -f[0]))[:nbest]
                results[sentences[i]] = [(ids, scores) for _, _, ids, scores in ranked] or [([], [])]
            keep = torch.tensor([i for i, d in enumerate(done) if not d], dtype=torch.long, device=device)
            search.keep(keep)
            kept_rows = keep.tolist()
            running, running_scores, token_scores = running[keep], running_scores[keep], token_scores[keep]
            states, finished = [states[i] for i in kept_rows], [finished[i] for i in kept_rows]
            terms, limits = [terms[i] for i in kept_rows], [limits[i] for i in kept_rows]
            b = len(kept_rows)
    return results
