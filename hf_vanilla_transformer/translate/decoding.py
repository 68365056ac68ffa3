"""The search of the torch engine: greedy, beam and sampling search over any encoder-decoder model, with each sentence
leaving the batch as soon as its result is final.

`generate()` computes every row of a batch until its last sentence ends, so in a length-sorted batch the sentences
with short translations wait, at full cost, for the longest one (some 40% of the decoder's work on the bundled test
split). Here a sentence leaves, with its rows of the key/value cache, the encoder states and the source mask, at the
step after which its result can no longer change.

Scores. A hypothesis' score is the sum of its tokens' log-probabilities, after the logits processors below. Greedy
search appends the most probable token; sampling draws from the distribution reshaped by `temperature`, `top_k` and
`top_p` (the recorded log-probabilities are those before that reshaping). Beam search with k beams extends every live
hypothesis of a sentence by every token and keeps the 2k best continuations: those among the first k that end (the end
token, or the sentence's length limit) join its finished list, ranked by score / n ** `length_penalty` for n new
tokens (the end token included), which keeps the k best; the k best that do not end go on. A sentence is done when
its finished list cannot improve: with `early_stopping=True` (the paper's) once it holds k hypotheses; with `False`
once the best live hypothesis, ranked at its current length, scores below the worst finished one; with `"never"` the
same at the longest length it may reach. These are the rules of transformers' and fairseq's beam search, so on the
same arithmetic `generate()` chooses the same tokens (tests/translate/test_decoding.py checks it on a trained model).

Logits processors, applied in this order to each step's log-probabilities (beam search) or logits (greedy, sampling):
`bad_words_ids`, `no_repeat_ngram_size`, `repetition_penalty` and `suppress_tokens` (transformers' public processor
classes), `min_new_tokens`/`min_length` (no end token before), `forced_bos_token_id` (the first token) and
`forced_eos_token_id` (the end token at the sentence's limit); `renormalize_logits` normalises after them. Any other
setting of a generation config is refused by `check_settings` before decoding, naming it.

Static cache (`static_cache`, from `static_cache`). The key/value cache is transformers' `StaticCache`, of fixed size:
the self-attention's for a number of target positions, the cross-attention's for the padded source. Its shapes do not
change from step to step, so the decoding step can be compiled once per batch shape (`compile_config`, the model's
`get_compiled_call`, as `generate()` does; the first step, which projects the source's keys and values, runs as it
is). Rows then never leave the batch: a sentence that is done stops counting, but its rows are computed until the
batch ends (so the search reads which sentences are done every CHECK_STEPS steps, without waiting for the device in
between), and beam search moves the self-attention cache's rows in place: the compiled step reads the cache at
fixed addresses (a CUDA graph is recorded again where they change, hence one cache per shape, reset for each batch).
The results are the dynamic cache's.

Vocabulary map (`candidates`, see `data/vocabulary_map.py`). The batch chooses among these target ids only: the search
runs over their positions in the list, from logits that the output layer computes for their rows alone (a step of its
own after the decoder's, so with either cache), and its results are mapped back to token ids. Each setting of the
generation config that names tokens is mapped likewise.
"""

import copy

import torch
from transformers import (
    CompileConfig,
    EncoderDecoderCache,
    GenerationConfig,
    LogitsProcessorList,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    StaticCache,
    SuppressTokensLogitsProcessor,
)
from transformers.modeling_outputs import BaseModelOutput

from ..data.trained_on import FIELD, token_ids
from ..errors import InputError
from ..model.input_checks import CACHE_NAME


# With the static cache a sentence that is done stays in the batch (its rows are computed anyway), so greedy and beam
# search read which sentences are done every CHECK_STEPS steps only: in between, the host queues the next steps while
# the device computes.
CHECK_STEPS = 4
# Generation settings that change nothing here or that this module applies (see the docstring).
APPLIED = {
    "num_beams",
    "length_penalty",
    "early_stopping",
    "max_length",
    "max_new_tokens",
    "min_length",
    "min_new_tokens",
    "num_return_sequences",
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "bad_words_ids",
    "no_repeat_ngram_size",
    "repetition_penalty",
    "suppress_tokens",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "renormalize_logits",
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
}
NEG = -1.0e9  # the score of a candidate that may not be chosen: finite, so sums of such scores stay ordered


def check_settings(model, generation_config: GenerationConfig) -> None:
    """Refuse, before any input is read, what this search cannot do for `model` with `generation_config`."""
    if not model.config.is_encoder_decoder:
        raise InputError(f"translate needs an encoder-decoder model, got a {type(model).__name__}.")
    if generation_config.decoder_start_token_id is None:
        raise InputError("The model's generation config has no decoder_start_token_id: the decoder cannot start.")
    unsupported = sorted(
        name for name in generation_config.to_diff_dict() if name not in APPLIED | {"_from_model_config"}
    )
    if unsupported:
        raise InputError(
            f"The generation settings {unsupported} (from the model's generation_config.json or the options) are not "
            f"applied by translate's search, which applies {sorted(APPLIED - {FIELD, 'transformers_version'})}."
        )


@torch.inference_mode()
def decode(
    model,
    input_ids,
    attention_mask,
    limits: list[int],
    generation_config: GenerationConfig,
    nbest: int,
    seed: int = 0,
    static_cache: EncoderDecoderCache | None = None,
    compile_config: CompileConfig | None = None,
    candidates: list[int] | None = None,
):
    """Per source row, its `nbest` hypotheses as (generated ids, their log-probabilities), best first, the end token
    included where the model ended them; sentence i stops after `limits[i]` new tokens. With `static_cache` (empty,
    of `max(limits)` target positions or more), the step compiled with `compile_config` where given (see the
    module's docstring); source rows after the first `len(limits)` then fill the batch up: computed, never decoded.
    `candidates`: the sorted token ids the batch chooses among (a vocabulary map's), with every id `config` names."""
    device = input_ids.device
    beams = 1 if generation_config.do_sample else generation_config.num_beams or 1
    search = Search.of(model, input_ids, attention_mask, generation_config, beams, candidates)
    config = search.config
    if static_cache is not None:
        search.use_static_cache(static_cache, compile_config, len(limits))
    eos = torch.tensor(token_ids(config.eos_token_id), device=device)
    limits = torch.tensor(limits, device=device)
    start = torch.full((len(limits),), config.decoder_start_token_id, device=device)
    if search.num_beams == 1:
        generator = torch.Generator(device).manual_seed(seed) if config.do_sample else None
        results = _greedy_or_sample(search, start, eos, limits, config, generator)
    else:
        results = _beam_search(search, start, eos, limits, config, nbest)
    return search.token_ids(results)


def candidate_ids(config: GenerationConfig) -> set[int]:
    """The token ids `config` names as tokens the search starts with, ends with or forces: a vocabulary map's
    candidates must include them."""
    named = (config.decoder_start_token_id, config.forced_bos_token_id)
    ends = (*token_ids(config.eos_token_id), *token_ids(config.forced_eos_token_id))
    return {*ends, *(i for i in named if i is not None)}


def _in_candidates(config: GenerationConfig, candidates: list[int]) -> GenerationConfig:
    """`config` with the token ids it names replaced by their positions among `candidates`; bans of tokens that are no
    candidates, which cannot be chosen anyway, are left out."""
    position = {token: i for i, token in enumerate(candidates)}
    missing = candidate_ids(config) - set(position)
    if missing:
        raise ValueError(f"The candidates lack the token ids {sorted(missing)} that the generation config names.")

    def each(ids):
        return None if ids is None else [position[i] for i in token_ids(ids)]

    def banned(sequences):
        kept = [[position[i] for i in ids] for ids in sequences or () if all(i in position for i in ids)]
        return kept or None

    config = copy.deepcopy(config)
    config.update(
        eos_token_id=each(config.eos_token_id),
        forced_eos_token_id=each(config.forced_eos_token_id),
        decoder_start_token_id=position[config.decoder_start_token_id],
        pad_token_id=position.get(config.pad_token_id),
        forced_bos_token_id=None if config.forced_bos_token_id is None else position[config.forced_bos_token_id],
        bos_token_id=position.get(config.bos_token_id),
        bad_words_ids=banned(config.bad_words_ids),
        suppress_tokens=[position[i] for i in config.suppress_tokens or () if i in position] or None,
    )
    return config


def static_cache(config, target_positions: int, source_length: int) -> EncoderDecoderCache:
    """An empty static cache for a model of `config`: `target_positions` self-attention positions, `source_length`
    cross-attention ones (the rows are set by the first step)."""
    return EncoderDecoderCache(
        StaticCache(config=config, max_cache_len=target_positions),
        StaticCache(config=config, max_cache_len=source_length),
    )


def _rows(outputs, select):
    """`outputs` (a `ModelOutput` of batch-first tensors) with `select` applied to each of its tensors."""
    return type(outputs)(**{name: select(value) for name, value in outputs.items()})


class Search:
    """The sentences still decoding: their encoder output, source masks and key/value cache, num_beams rows each, and
    the logits processors of the generation config.

    Each step calls the model as `generate()` does, with the encoder output as the encoder returned it (its tensors
    cut to the rows still decoding) and the source mask: what a model found once about its source, it may keep in its
    encoder output (this package's model: whether the source has padding)."""

    def __init__(self, model, encoder_outputs, attention_mask, num_beams: int, config: GenerationConfig):
        self.model, self.num_beams, self.config, self.cache = model, num_beams, config, None
        self.encoder_outputs = _rows(encoder_outputs, lambda tensor: tensor.repeat_interleave(num_beams, dim=0))
        self.attention_mask = attention_mask.repeat_interleave(num_beams, dim=0)
        self.sentences = torch.arange(attention_mask.shape[0], device=attention_mask.device)  # their input rows
        eos = token_ids(config.eos_token_id)
        self.eos = eos
        self.processors = LogitsProcessorList()
        if config.bad_words_ids:
            self.processors.append(NoBadWordsLogitsProcessor(config.bad_words_ids, eos))
        if config.no_repeat_ngram_size:
            self.processors.append(NoRepeatNGramLogitsProcessor(config.no_repeat_ngram_size))
        if config.repetition_penalty is not None and config.repetition_penalty != 1.0:
            self.processors.append(RepetitionPenaltyLogitsProcessor(config.repetition_penalty))
        if config.suppress_tokens:
            self.processors.append(SuppressTokensLogitsProcessor(config.suppress_tokens, device=attention_mask.device))
        self.min_new_tokens = config.min_new_tokens or max((config.min_length or 0) - 1, 0)
        self.live = None  # static cache: the cache rows of the rows still decoding
        self.compile_config, self.first_step = None, True  # static cache: its step compiled after the first
        self.candidates = None  # a vocabulary map's: the token ids of the positions the search chooses among

    @classmethod
    def of(cls, model, input_ids, attention_mask, config: GenerationConfig, num_beams: int, candidates=None):
        """The search over the encoded sources, choosing among `candidates` where given (their positions then stand
        for the token ids, in `config` too: `self.config`)."""
        if candidates is not None:
            config = _in_candidates(config, candidates)
        encoded = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        search = cls(model, encoded, attention_mask, num_beams, config)
        if candidates is not None:
            search.use_candidates(torch.tensor(candidates, device=input_ids.device))
        return search

    def token_ids(self, results):
        """Per sentence, its hypotheses (ids, scores) with the candidates' positions mapped back to token ids."""
        if self.candidates is None:
            return results
        candidates = self.candidates.tolist()
        return [[([candidates[i] for i in ids], scores) for ids, scores in hypotheses] for hypotheses in results]

    def use_static_cache(self, cache: EncoderDecoderCache, compile_config: CompileConfig | None, sentences: int):
        """Decode through `cache`, the first `sentences` sentences (the other rows fill the batch up)."""
        rows, device, self.cache = self.attention_mask.shape[0], self.attention_mask.device, cache
        # The encoder's states alone: the model reads the source's padding from the mask at every step, so that the
        # compiled step is one graph, with or without padding.
        self.encoder_outputs = BaseModelOutput(last_hidden_state=self.encoder_outputs.last_hidden_state)
        self.sentences = self.sentences[:sentences]
        self.live = torch.arange(sentences * self.num_beams, device=device)
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)
        self.compile_config = compile_config

    def use_candidates(self, candidates: torch.Tensor):
        """Choose among the tokens `candidates` only: the output layer's rows of those tokens (see the module's
        docstring); the tokens the search passes are their positions in `candidates`."""
        self.candidates, self.output_layer = candidates, _output_layer(self.model, candidates)

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """(rows, vocab) float32 logits of the next token after `tokens` (rows,): (rows, candidates) with those.
        One model call per step, the same for every cache, and the output layer as a step of its own where a
        vocabulary map chooses its rows (the model's own forward otherwise, whatever its output layer does)."""
        if self.live is not None:  # static cache: every row is computed, the live ones are read
            self.tokens[self.live] = tokens
            tokens = self.tokens
        forward = self.model if self.candidates is None else self.model.base_model
        if self.compile_config is not None and not self.first_step:  # (transformers keeps the compiled call)
            forward = forward.get_compiled_call(self.compile_config)
        self.first_step = False
        outputs = forward(
            encoder_outputs=self.encoder_outputs,
            attention_mask=self.attention_mask,
            decoder_input_ids=(tokens if self.candidates is None else self.candidates[tokens])[:, None],
            use_cache=True,
            return_dict=True,
            **{CACHE_NAME: self.cache},
        )
        if self.live is None:  # (a static cache is filled in place)
            self.cache = outputs[CACHE_NAME]
        rows = slice(None) if self.live is None else self.live
        if self.candidates is None:
            return outputs.logits[rows, -1, :].to(dtype=torch.float32)
        return self.output_layer(outputs.last_hidden_state[rows, -1, :]).to(dtype=torch.float32)

    def process(self, sequences: torch.Tensor, scores: torch.Tensor, step: int, at_limit: torch.Tensor):
        """The scores of the next token after `sequences` (rows, decoder start + `step` tokens), processed; rows
        `at_limit` take their last token."""
        scores = self.processors(sequences, scores)
        if step < self.min_new_tokens and self.eos:
            scores[:, self.eos] = -float("inf")
        if step == 0 and self.config.forced_bos_token_id is not None:
            scores = _force(scores, torch.ones_like(at_limit), self.config.forced_bos_token_id)
        if self.config.forced_eos_token_id is not None:
            scores = _force(scores, at_limit, token_ids(self.config.forced_eos_token_id))
        return scores.log_softmax(-1) if self.config.renormalize_logits else scores

    def keep(self, sentences: torch.Tensor) -> torch.Tensor:
        """Go on with these sentences (indices into the current ones) only; returns them for indexing other state."""
        rows = (sentences[:, None] * self.num_beams + torch.arange(self.num_beams, device=sentences.device)).view(-1)
        self.sentences = self.sentences[sentences]
        if self.live is not None:
            self.live = self.live[rows]
            return sentences
        self.cache.reorder_cache(rows)
        self.encoder_outputs = _rows(self.encoder_outputs, lambda tensor: tensor.index_select(0, rows))
        self.attention_mask = self.attention_mask.index_select(0, rows)
        return sentences

    def follow(self, rows: torch.Tensor) -> None:
        """Beam search's new rows: each the continuation of row `rows[i]`. The beams of one sentence share its
        cross-attention keys and values, so only the self-attention cache follows them."""
        if self.live is None:
            getattr(self.cache, "self_attention_cache", self.cache).reorder_cache(rows)
            return
        source = torch.arange(self.tokens.shape[0], device=rows.device)
        source[self.live] = self.live[rows]
        for layer in self.cache.self_attention_cache.layers:
            layer.keys.copy_(layer.keys.index_select(0, source))
            layer.values.copy_(layer.values.index_select(0, source))


def _output_layer(model, candidates: torch.Tensor):
    """The model's output layer for the rows of `candidates` only: its linear layer (float, or int8 as dynamic
    quantization made it) with the model's `final_logits_bias` (MarianMT, BART) where it has one."""
    layer = model.get_output_embeddings()
    if isinstance(layer, torch.ao.nn.quantized.dynamic.Linear):
        weight, bias = layer.weight().index_select(0, candidates), layer.bias()
        rows = torch.ao.nn.quantized.dynamic.Linear(layer.in_features, len(candidates), bias_=False, dtype=torch.qint8)
        rows.set_weight_bias(weight, None if bias is None else bias[candidates])
    else:
        bias = None if layer.bias is None else layer.bias[candidates]
        weight = layer.weight[candidates]
        rows = lambda hidden: torch.nn.functional.linear(hidden, weight, bias)  # noqa: E731
    final_bias = getattr(model, "final_logits_bias", None)
    if final_bias is None:
        return rows
    final_bias = final_bias[..., candidates]
    return lambda hidden: rows(hidden) + final_bias


def _force(scores: torch.Tensor, rows: torch.Tensor, allowed: list[int]) -> torch.Tensor:
    """`scores` where `rows` (bool) may only take one of the token ids `allowed`."""
    forced = torch.full_like(scores, -float("inf"))
    forced[:, allowed] = 0.0
    return torch.where(rows[:, None], forced, scores)


def _sample(logits: torch.Tensor, config: GenerationConfig, generator: torch.Generator) -> torch.Tensor:
    """One token per row, drawn from `logits` / temperature, within the top_k and the top_p nucleus."""
    logits = logits / (config.temperature or 1.0)
    if config.top_k:
        kth = logits.topk(min(config.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -float("inf"))
    if config.top_p is not None and config.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1)
        drop = sorted_logits.softmax(-1).cumsum(-1) <= 1 - config.top_p  # the least likely tokens outside the nucleus
        drop[:, -1] = False  # the most likely token always stays
        logits = logits.masked_fill(drop.scatter(1, order, drop), -float("inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(1)


def _greedy_or_sample(search: Search, start, eos, limits, config: GenerationConfig, generator):
    b, device, longest = start.shape[0], start.device, int(limits.max())
    sequences = torch.zeros((b, longest + 1), dtype=torch.long, device=device)
    sequences[:, 0] = start
    token_scores = torch.zeros((b, longest), device=device)
    ends = torch.zeros(b, dtype=torch.long, device=device)  # the step at which each row ended; 0 while it goes on
    results = [None] * b
    tokens, step = start, 0
    # Sampling reads which sentences are done at every step: the rows it draws for decide the random numbers.
    check_steps = CHECK_STEPS if search.live is not None and generator is None else 1
    while b:
        logits = search.process(sequences[:, : step + 1], search.logits(tokens), step, step + 1 >= limits)
        log_probs = logits.log_softmax(-1)
        tokens = _sample(logits, config, generator) if generator is not None else logits.argmax(-1)
        step += 1
        sequences[:, step] = tokens
        token_scores[:, step - 1] = log_probs.gather(1, tokens[:, None]).squeeze(1)
        ends = torch.where((ends == 0) & (torch.isin(tokens, eos) | (step >= limits)), step, ends)
        if step % check_steps and step < longest:
            continue
        done = ends > 0
        if done.any():
            sentences, lengths = search.sentences.tolist(), ends.tolist()
            for i in done.nonzero().squeeze(1).tolist():
                n = lengths[i]
                results[sentences[i]] = [(sequences[i, 1 : n + 1].tolist(), token_scores[i, :n].tolist())]
            keep = search.keep((~done).nonzero().squeeze(1))
            tokens, limits, sequences, token_scores, ends = (
                tensor[keep] for tensor in (tokens, limits, sequences, token_scores, ends)
            )
            b = keep.numel()
    return results


def _beam_search(search: Search, start, eos, limits, config: GenerationConfig, nbest: int):
    """Beam search as the module's docstring ranks it. Shapes: b sentences still decoding, k beams, K candidates kept
    per step, T positions (the decoder start token and the longest limit)."""
    b, k, device = start.shape[0], search.num_beams, start.device
    K = max(2, 1 + eos.numel()) * k  # enough candidates that k go on even if every end token is among them
    length_penalty = 1.0 if config.length_penalty is None else config.length_penalty
    early_stopping = config.early_stopping
    T = int(limits.max()) + 1
    may_finish = torch.arange(K, device=device) < k  # only the k best candidates may finish
    running = torch.zeros((b, k, T), dtype=torch.long, device=device)
    running[:, :, 0] = start[:, None]
    running_scores = torch.zeros((b, k), device=device)
    running_scores[:, 1:] = NEG  # the k beams start as one hypothesis
    running_token_scores = torch.zeros((b, k, T - 1), device=device)
    finished, finished_token_scores = running.clone(), running_token_scores.clone()
    finished_scores = torch.full((b, k), NEG, device=device)
    finished_lengths = torch.zeros((b, k), dtype=torch.long, device=device)
    is_finished = torch.zeros((b, k), dtype=torch.bool, device=device)
    can_improve = torch.ones((b, 1), dtype=torch.bool, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    check_steps = CHECK_STEPS if search.live is not None else 1
    results = [None] * b
    length = 1  # tokens so far, the decoder start token included
    while b:
        log_probs = search.logits(running[:, :, length - 1].reshape(-1)).log_softmax(-1)  # (b*k, V)
        at_limit = (length >= limits).repeat_interleave(k)
        log_probs = search.process(running[:, :, :length].reshape(b * k, length), log_probs, length - 1, at_limit)
        vocab = log_probs.shape[-1]
        log_probs = log_probs.reshape(b, k * vocab)
        top_scores, top_indices = torch.topk((log_probs.view(b, k, vocab) + running_scores[:, :, None]).view(b, -1), K)
        beams = top_indices // vocab  # (b, K)
        candidates = torch.take_along_dim(running, beams[:, :, None], dim=1)
        candidates[:, :, length] = top_indices % vocab
        candidate_token_scores = torch.take_along_dim(running_token_scores, beams[:, :, None], dim=1)
        candidate_token_scores[:, :, length - 1] = log_probs.gather(1, top_indices)
        ends = torch.isin(candidates[:, :, length], eos) | (length >= limits[:, None])

        # The k best candidates that go on.
        running_candidate_scores = top_scores + ends.to(torch.float32) * NEG
        following = torch.topk(running_candidate_scores, k=k)[1]
        running = torch.take_along_dim(candidates, following[:, :, None], dim=1)
        running_scores = torch.take_along_dim(running_candidate_scores, following, dim=1)
        running_token_scores = torch.take_along_dim(candidate_token_scores, following[:, :, None], dim=1)
        rows = torch.take_along_dim(beams, following, dim=1) + torch.arange(b, device=device)[:, None] * k

        # The k best finished hypotheses, ranked by score / length ** length_penalty.
        just_finished = ends & may_finish[None, :]
        scores = top_scores / (length**length_penalty)
        scores += (is_finished.all(-1, keepdim=True) & (early_stopping is True)).to(torch.float32) * NEG
        scores += (~can_improve).to(torch.float32) * NEG
        scores += (~just_finished) * NEG
        best = torch.topk(torch.cat((finished_scores, scores), dim=1), k=k)[1]
        finished = torch.take_along_dim(torch.cat((finished, candidates), dim=1), best[:, :, None], dim=1)
        finished_token_scores = torch.take_along_dim(
            torch.cat((finished_token_scores, candidate_token_scores), dim=1), best[:, :, None], dim=1
        )
        finished_scores = torch.take_along_dim(torch.cat((finished_scores, scores), dim=1), best, dim=1)
        lengths = torch.full((b, K), length, dtype=torch.long, device=device)
        finished_lengths = torch.take_along_dim(torch.cat((finished_lengths, lengths), dim=1), best, dim=1)
        is_finished = torch.take_along_dim(torch.cat((is_finished, just_finished), dim=1), best, dim=1)

        search.follow(rows.view(-1))
        length += 1
        # Whether the best live hypothesis could still beat the worst finished one.
        reachable = T - 1 if early_stopping == "never" and length_penalty > 0.0 else length - 1
        best_running = running_scores[:, :1] / (reachable**length_penalty)
        worst_finished = torch.where(is_finished, finished_scores.min(dim=1, keepdim=True)[0], NEG)
        can_improve = can_improve & (best_running > worst_finished).any(-1, keepdim=True)

        # What ends a sentence keeps its finished list as it is from then on (no candidate can enter it), so a
        # sentence may stay until the next check.
        done = done | ~can_improve[:, 0] | (is_finished.all(-1) & (early_stopping is True)) | ends.all()
        if (length - 1) % check_steps and length < T:
            continue
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
            can_improve, limits, done = can_improve[keep], limits[keep], done[keep]
            b = keep.numel()
    return results
