// The no-server page: loads the ONNX model in model/ with transformers.js and translates greedily on click, sentence
// by sentence as the translate command does (translateText; the settings come from demo.json).
// Everything comes from this folder: remote models are off (translate.mjs) and ONNX Runtime's WebAssembly files are
// served from runtime/ instead of its default CDN.
import { env } from '@huggingface/transformers';
import { loadTranslator, translateText } from './translate.mjs';

const here = new URL('./', import.meta.url);
// A path, not a full URL: transformers.js looks up "local" files only under paths.
env.localModelPath = here.pathname;
env.useBrowserCache = false; // a rebuilt model at the same address must not come from the cache
// ONNX Runtime's plain WebAssembly build (CPU); by default it would fetch its WebGPU-capable build from a CDN.
env.backends.onnx.wasm.wasmPaths = {
  mjs: here.href + 'runtime/ort-wasm-simd-threaded.mjs',
  wasm: here.href + 'runtime/ort-wasm-simd-threaded.wasm',
};

const MAX_CHARACTERS = 2000;
const [body, source, button, target, status, split] = [document.body, ...['source', 'translate', 'target', 'status',
  'split_sentences'].map((id) => document.getElementById(id))];

function show(message, isError = false) {
  status.textContent = message;
  status.classList.toggle('error', isError);
}

async function run(translator, settings) {
  const text = source.value;
  if (!text.trim()) return show('Please type a German sentence to translate.', true);
  if (text.length > MAX_CHARACTERS) {
    return show(`The text is too long (${text.length} characters; at most ${MAX_CHARACTERS}): please shorten it.`, true);
  }
  button.disabled = true;
  target.dataset.state = 'busy';
  show('Translating…');
  try {
    const start = performance.now();
    const result = await translateText(translator, text, { ...settings, split_sentences: split.checked });
    target.textContent = result.text;
    const note = result.split ? ` ${result.split} sentence(s) longer than the model learned were split.` : '';
    show(`Translated in ${Math.round(performance.now() - start)} ms.${note}`);
  } catch (error) {
    target.textContent = '';
    show(`Translation failed: ${error.message ?? error}`, true);
  } finally {
    target.dataset.state = 'done';
    button.disabled = false;
  }
}

try {
  const settings = await (await fetch('./demo.json')).json();
  document.title = settings.title;
  document.getElementById('title').textContent = settings.title;
  const start = performance.now();
  const translator = await loadTranslator('model', { dtype: 'fp32' });
  for (const example of settings.examples) {
    const chip = document.createElement('button');
    chip.textContent = example;
    chip.addEventListener('click', () => { source.value = example; run(translator, settings); });
    document.getElementById('examples').append(chip);
  }
  button.addEventListener('click', () => run(translator, settings));
  source.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey) { event.preventDefault(); run(translator, settings); }
  });
  button.disabled = false;
  show(`Model loaded in ${Math.round(performance.now() - start)} ms (transformers.js ${settings.transformers_js}).`);
  body.dataset.state = 'ready';
} catch (error) {
  show(`The model could not be loaded: ${error.message ?? error}`, true);
  body.dataset.state = 'error';
}
