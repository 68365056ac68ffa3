// Greedy translation with transformers.js from an ONNX folder written by hf_vanilla_transformer's export_onnx
// (model_type "marian"), from local files only. The two exported functions work the same in a browser (give them the
// model's id under env.localModelPath there); run with Node, the file reads a JSON request on stdin:
//     echo '{"model": "/abs/path/to/folder", "texts": ["Wo ist der Bahnhof?"], "max_new_tokens": 64, "dtype": "fp32"}' \
//         | node translate.mjs
// and prints {"ids": [[...], ...], "texts": [...]}: the generated ids (decoder start first) and their decoding.
import { AutoModelForSeq2SeqLM, AutoTokenizer, env } from '@huggingface/transformers';

env.allowRemoteModels = false;
env.allowLocalModels = true;

// dtype "fp32" loads onnx/encoder_model.onnx and onnx/decoder_model_merged.onnx, "q8" their *_quantized.onnx copies.
export async function loadTranslator(modelId, { dtype = 'fp32' } = {}) {
  const tokenizer = await AutoTokenizer.from_pretrained(modelId);
  const model = await AutoModelForSeq2SeqLM.from_pretrained(modelId, { dtype });
  return { tokenizer, model };
}

export async function translate({ tokenizer, model }, texts, { max_new_tokens = 256 } = {}) {
  const inputs = tokenizer(texts, { padding: true, truncation: true });
  const output = await model.generate({ ...inputs, max_new_tokens, num_beams: 1, do_sample: false });
  const ids = output.tolist().map((row) => row.map(Number));
  return { ids, texts: tokenizer.batch_decode(output, { skip_special_tokens: true }) };
}

async function main() {
  const { basename, dirname } = await import('node:path');
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const request = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  env.localModelPath = dirname(request.model) + '/';
  const translator = await loadTranslator(basename(request.model), { dtype: request.dtype ?? 'fp32' });
  const result = await translate(translator, request.texts, { max_new_tokens: request.max_new_tokens ?? 256 });
  process.stdout.write(JSON.stringify(result) + '\n');
}

if (typeof process !== 'undefined' && process.argv?.[1]) {
  const { pathToFileURL } = await import('node:url');
  if (import.meta.url === pathToFileURL(process.argv[1]).href) await main();
}
