// Greedy translation with transformers.js from an ONNX folder written by hf_vanilla_transformer's export_onnx
// (model_type "marian"), from local files only, and the sentence splitting of the translate command, for the
// no-server page. The exported functions work the same in a browser (give them the model's id under
// env.localModelPath there); run with Node, the file reads a JSON request on stdin:
//     echo '{"model": "/abs/path/to/folder", "texts": ["Wo ist der Bahnhof?"], "max_new_tokens": 64, "dtype": "fp32"}' \
//         | node translate.mjs
// and prints {"ids": [[...], ...], "texts": [...]}: the generated ids (decoder start first) and their decoding. With
// "segments": {"rules": ..., "source_lang": ..., "max_source_tokens": ..., "split_sentences": ...} instead of
// max_new_tokens, it prints {"segments": [[pieces, sentences split], ...]}, the pieces of each text as segments()
// makes them (below).
import { AutoModelForSeq2SeqLM, AutoTokenizer, env } from '@huggingface/transformers';

env.allowRemoteModels = false;
env.allowLocalModels = true;

// dtype "fp32" loads onnx/encoder_model.onnx and onnx/decoder_model_merged.onnx, "q8" their *_quantized.onnx copies.
export async function loadTranslator(modelId, { dtype = 'fp32' } = {}) {
  const tokenizer = await AutoTokenizer.from_pretrained(modelId);
  const model = await AutoModelForSeq2SeqLM.from_pretrained(modelId, { dtype });
  return { tokenizer, model };
}

// `max_new_tokens` has no default: the caller gives the paper's limit for these sources (source length + 50 within
// the model's positions), which hf_vanilla_transformer computes (max_new_tokens_for).
export async function translate({ tokenizer, model }, texts, { max_new_tokens }) {
  if (!Number.isInteger(max_new_tokens)) throw new Error('translate() needs max_new_tokens');
  const inputs = tokenizer(texts, { padding: true, truncation: true });
  const output = await model.generate({ ...inputs, max_new_tokens, num_beams: 1, do_sample: false });
  const ids = output.tolist().map((row) => row.map(Number));
  return { ids, texts: tokenizer.batch_decode(output, { skip_special_tokens: true }) };
}

// ------------------------------------------------------------------------------------------------------ sentences
// The rules of hf_vanilla_transformer/translate/sentences.py (its docstring says them), which hands them over as
// data (its RULES, in the page's demo.json). Functions mirror that file's, name for name; a test runs both on the
// same texts. Character tests go by code point, as in Python.

const compiled = new WeakMap();

function characterClass(characters) {
  return '[' + [...characters].map((c) => c.replace(/[\\\]\[^-]/g, '\\$&')).join('') + ']';
}

function compile(rules) {
  if (!compiled.has(rules)) {
    const ws = characterClass(rules.whitespace);
    const notWs = '[^' + ws.slice(1);
    const closers = characterClass(rules.closers);
    compiled.set(rules, {
      ends: new RegExp(`(${characterClass(rules.terminals + rules.cjk_terminals)}+)(${closers}*)(${ws}*)`, 'gu'),
      clauses: new RegExp(
        `${characterClass(rules.clause_marks)}${closers}*${ws}+|${ws}+(?=${characterClass(rules.dashes)}(?:${ws}|$))`,
        'gu',
      ),
      words: new RegExp(`${ws}*${notWs}+${ws}*`, 'gu'),
      nextWord: new RegExp(`${notWs}*?(?=${ws}|${characterClass(rules.terminals + rules.clause_marks)}|$)`, 'uy'),
      abbreviations: new Set(rules.abbreviations),
      numberAbbreviations: new Set(rules.number_abbreviations),
      starters: new Set(rules.sentence_starters),
    });
  }
  return compiled.get(rules);
}

const codePoint = (text, i) => String.fromCodePoint(text.codePointAt(i));
const isLower = (character) => /^\p{Ll}$/u.test(character);
const isLetter = (character) => /^\p{L}$/u.test(character);

function strip(text, start, end, rules) {
  while (start < end && rules.whitespace.includes(text[start])) start += 1;
  while (end > start && rules.whitespace.includes(text[end - 1])) end -= 1;
  return [start, end];
}

function endsSentence(text, match, language, rules) {
  const [whole, run, closers] = match;
  const c = compile(rules);
  const end = match.index + whole.length;
  let following = end;
  while (following < text.length && rules.openers.includes(text[following])) following += 1;
  if (following < text.length && isLower(codePoint(text, following))) return false; // rule 1
  if (run !== '.' || closers) return true;
  let wordStart = match.index;
  while (wordStart > 0 && !rules.whitespace.includes(text[wordStart - 1])) wordStart -= 1;
  while (wordStart < match.index && rules.openers.includes(text[wordStart])) wordStart += 1;
  const word = text.slice(wordStart, match.index);
  const after = codePoint(text, end);
  if (c.abbreviations.has(word) || (c.numberAbbreviations.has(word) && '0123456789'.includes(after))) {
    return false; // rules 2a, 2b
  }
  if (([...word].length === 1 && isLetter(word)) || (word.includes('.') && !/[0-9]/.test(word))) {
    return false; // rules 2c, 2d
  }
  if (!rules.ordinal_languages.includes(language) || !/^[0-9]{1,3}$/.test(word) || !isLetter(after)) return true;
  c.nextWord.lastIndex = end;
  return c.starters.has(c.nextWord.exec(text)[0]); // rule 2e
}

export function sentenceSpans(text, rules, language = null) {
  language = language ? language.split('-')[0].split('_')[0].toLowerCase() : null;
  const spans = [];
  let start = 0;
  for (const match of text.matchAll(compile(rules).ends)) {
    const end = match.index + match[0].length;
    if (end === text.length) break;
    if (!match[3] && !rules.cjk_terminals.includes(match[1].slice(-1))) continue;
    if (endsSentence(text, match, language, rules)) {
      spans.push([start, end - match[3].length]);
      start = end;
    }
  }
  spans.push([start, text.length]);
  return spans.map(([i, j]) => strip(text, i, j, rules)).filter(([i, j]) => i < j);
}

export function splitSentences(text, rules, language = null) {
  return sentenceSpans(text, rules, language).map(([i, j]) => text.slice(i, j));
}

function cut(text, ends) {
  const starts = [0, ...ends];
  return starts.map((i, k) => text.slice(i, k < ends.length ? ends[k] : text.length)).filter((unit) => unit);
}

const LEVELS = [
  (text, rules, language) => cut(text, sentenceSpans(text, rules, language).slice(1).map(([i]) => i)),
  (text, rules) => cut(text, [...text.matchAll(compile(rules).clauses)].map((m) => m.index + m[0].length)),
  (text, rules) => text.match(compile(rules).words) ?? [],
  (text) => Array.from(text),
];

export function splitToFit(text, fits, rules, language = null, level = 0) {
  const [start, end] = strip(text, 0, text.length, rules);
  if (start === end) return [];
  if (fits(text.slice(start, end))) return [[start, end]];
  if (level === LEVELS.length) throw new Error(`Cannot split ${JSON.stringify(text)} into pieces that fit.`);
  const units = LEVELS[level](text, rules, language);
  if (units.length <= 1) return splitToFit(text, fits, rules, language, level + 1);
  const spans = [];
  const stripped = (piece) => piece.slice(...strip(piece, 0, piece.length, rules));
  let first = 0;
  let offset = 0;
  while (first < units.length) {
    let [low, high] = [first + 1, units.length]; // the largest last with fits(units[first:last]); at least one unit
    while (low < high) {
      const middle = Math.floor((low + high + 1) / 2);
      if (fits(stripped(units.slice(first, middle).join('')))) low = middle;
      else high = middle - 1;
    }
    const group = units.slice(first, low).join('');
    for (const [i, j] of splitToFit(group, fits, rules, language, level + 1)) spans.push([offset + i, offset + j]);
    offset += group.length;
    first = low;
  }
  return spans;
}

export function segments(line, fits, rules, language = null, split = true) {
  const spans = split ? sentenceSpans(line, rules, language) : [strip(line, 0, line.length, rules)];
  const pieces = [];
  let tooLong = 0;
  let previous = null;
  for (const [start, end] of spans) {
    const parts = splitToFit(line.slice(start, end), fits, rules, language);
    if (parts.length > 1) tooLong += 1;
    for (const [i, j] of parts) {
      pieces.push([previous === null ? '' : line.slice(previous, start + i), line.slice(start + i, start + j)]);
      previous = start + j;
    }
  }
  return [pieces, tooLong];
}

export function join(separators, texts) {
  return texts.map((text, k) => (k ? (separators[k] || ' ') + text : text)).join('');
}

// A text of several lines translated as the translate command does it: each line split into sentences, each
// sentence longer than `max_source_tokens` into pieces, the pieces translated in length-sorted batches of at most
// `max_tokens` padded source tokens, and joined back line by line. `max_new_tokens[n]` is the limit for a batch
// whose longest source has n tokens. Returns the text and the number of sentences that had to be split.
export async function translateText(translator, text, settings) {
  const { rules, source_lang: language, max_source_tokens: limit, max_new_tokens, max_tokens } = settings;
  const count = (piece) => translator.tokenizer.encode(piece).length;
  const lines = text.split('\n').map((line) => line.replace(/\r$/, ''));
  const segmented = lines.map((line) =>
    segments(line, (piece) => !limit || count(piece) <= limit, rules, language, settings.split_sentences ?? true),
  );
  const pieces = segmented.flatMap(([linePieces]) => linePieces.map(([, piece]) => piece));
  const lengths = pieces.map(count);
  const order = pieces.map((_, i) => i).sort((a, b) => lengths[b] - lengths[a]);
  const translations = new Array(pieces.length);
  for (let first = 0; first < order.length; ) {
    let last = first + 1; // longest first: a batch's padded size is its count times its first length
    while (last < order.length && (last - first + 1) * lengths[order[first]] <= max_tokens) last += 1;
    const batch = order.slice(first, last);
    const limitOf = Array.isArray(max_new_tokens) ? max_new_tokens[lengths[batch[0]]] : max_new_tokens;
    const { texts } = await translate(translator, batch.map((i) => pieces[i]), { max_new_tokens: limitOf });
    batch.forEach((i, k) => { translations[i] = texts[k]; });
    first = last;
  }
  let next = 0;
  const output = segmented.map(([linePieces]) =>
    join(linePieces.map(([separator]) => separator), linePieces.map(() => translations[next++])),
  );
  return { text: output.join('\n'), split: segmented.reduce((sum, [, tooLong]) => sum + tooLong, 0) };
}

async function main() {
  const { basename, dirname } = await import('node:path');
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const request = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  env.localModelPath = dirname(request.model) + '/';
  if (request.segments) {
    const { rules, source_lang: language, max_source_tokens: limit, split_sentences: split } = request.segments;
    const tokenizer = await AutoTokenizer.from_pretrained(basename(request.model));
    const fits = (piece) => !limit || tokenizer.encode(piece).length <= limit;
    const result = request.texts.map((text) => segments(text, fits, rules, language, split ?? true));
    process.stdout.write(JSON.stringify({ segments: result }) + '\n');
    return;
  }
  const translator = await loadTranslator(basename(request.model), { dtype: request.dtype ?? 'fp32' });
  const result = await translate(translator, request.texts, { max_new_tokens: request.max_new_tokens });
  process.stdout.write(JSON.stringify(result) + '\n');
}

if (typeof process !== 'undefined' && process.argv?.[1]) {
  const { pathToFileURL } = await import('node:url');
  if (import.meta.url === pathToFileURL(process.argv[1]).href) await main();
}
