"""Both pages in a real browser (headless Chromium through Selenium): the Gradio demo and the no-server page.

The no-server page must translate exactly like PyTorch's greedy search, and load nothing from outside its folder.
"""

import json

import pytest

from hf_vanilla_transformer import cli
from hf_vanilla_transformer.demo.attention import attention_maps
from hf_vanilla_transformer.translate.options import DecodeOptions
from hf_vanilla_transformer.translate.translator import load_translator, translate_lines
from tests.helpers import (
    DEMO_SENTENCES,
    chrome,
    free_port,
    requested_urls,
    require_chromium,
    require_transformers_js,
    static_server,
    tiny_translator_dir,
)


gradio = pytest.importorskip("gradio", reason="gradio is in the `demo` and `dev` extras: pip install -e '.[dev]'")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


pytestmark = pytest.mark.slow  # servers, browsers, whole command runs


# Umlauts and ß: the page's tokenizer (transformers.js) must split them like the Rust one.
STATIC_PAGE_SENTENCES = [*DEMO_SENTENCES, "Größer ist nicht immer besser.", "Er mag Äpfel und Bücher."]


@pytest.fixture(scope="module")
def browser():
    require_chromium()
    with chrome() as session:
        yield session


@pytest.fixture(scope="module")
def gradio_url(model_dir):
    from hf_vanilla_transformer.demo.gradio_app import launch

    demo = launch(str(model_dir), port=free_port(), prevent_thread_lock=True, quiet=True)
    try:
        yield demo.local_url
    finally:
        demo.close()


def type_into(element, text):
    element.clear()
    if "\n" in text:  # Enter would press the page's translate key
        element.parent.execute_script("arguments[0].value = arguments[1]", element, text)
    else:
        element.send_keys(text)


def test_gradio_page_translates_and_draws_the_heatmap(browser, gradio_url, reference):
    model, tokenizer = reference
    wait = WebDriverWait(browser, 120)
    browser.get(gradio_url)
    source = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#source textarea"))
    type_into(source, DEMO_SENTENCES[0])
    browser.find_element(By.ID, "translate").click()
    expected = attention_maps(model, tokenizer, DEMO_SENTENCES[0]).translation
    target = browser.find_element(By.CSS_SELECTOR, "#target textarea")
    wait.until(lambda b: target.get_attribute("value") == expected)

    def heatmap():  # (src, natural width, natural height) once the image has loaded
        image = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#heatmap img"))
        wait.until(lambda b: b.execute_script("return arguments[0].complete", image))
        return browser.execute_script(
            "return [arguments[0].src, arguments[0].naturalWidth, arguments[0].naturalHeight]", image
        )

    cross, width, height = heatmap()
    assert width > 100 and height > 100
    # Another kind of attention is redrawn from the stored weights.
    browser.find_element(By.XPATH, "//label[contains(., 'encoder self-attention')]").click()
    wait.until(lambda b: heatmap()[0] != cross)
    assert heatmap()[1] > 100

    # Bad input: a message in the page, the translation cleared.
    type_into(source, "   ")
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda b: "Please type a German sentence" in b.find_element(By.ID, "message").text)
    assert target.get_attribute("value") == ""


@pytest.fixture(scope="module")
def static_page(model_dir, tmp_path_factory):
    require_chromium()
    pytest.importorskip("onnxscript", reason="the ONNX export needs the `export` extra: pip install -e '.[dev]'")
    from hf_vanilla_transformer.demo.web_page import build_web_page

    require_transformers_js()
    folder = build_web_page(model_dir, tmp_path_factory.mktemp("site"), overwrite=True)
    with static_server(folder) as url:
        yield folder, url


def test_static_page_translates_like_pytorch_greedy_from_local_files_only(browser, static_page, reference, model_dir):
    folder, url = static_page
    model, tokenizer = reference
    settings = json.loads((folder / "demo.json").read_text())
    assert settings["max_new_tokens"] == [24] * (128 + 1)  # the model's own limit; it accepts 128 tokens
    translator, greedy = load_translator(str(model_dir), device="cpu"), DecodeOptions(num_beams=1)
    assert settings["max_source_tokens"] == translator.max_source_tokens == 128
    wait = WebDriverWait(browser, 180)
    requested_urls(browser)  # clears the log
    browser.get(url)
    wait.until(lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-state") != "loading")
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "ready", browser.find_element(
        By.ID, "status"
    ).text
    # The page's tokenizer (transformers.js) splits like the Rust one; the undertrained model alone would not show it.
    browser_ids = browser.execute_async_script(
        """const [texts, done] = arguments;
        import('@huggingface/transformers').then(async ({ AutoTokenizer }) => {
          const tokenizer = await AutoTokenizer.from_pretrained('model');
          done(texts.map((text) => tokenizer.encode(text)));
        });""",
        STATIC_PAGE_SENTENCES,
    )
    assert browser_ids == tokenizer(STATIC_PAGE_SENTENCES)["input_ids"]
    source, target = browser.find_element(By.ID, "source"), browser.find_element(By.ID, "target")
    paragraph = f"{' '.join(STATIC_PAGE_SENTENCES[:3])}\n\n{STATIC_PAGE_SENTENCES[3]}  {STATIC_PAGE_SENTENCES[4]}"
    for text in [*STATIC_PAGE_SENTENCES, paragraph]:
        # As the translate command does it (sentence by sentence, line by line), greedily.
        expected = "\n".join(
            t.hypotheses[0].text if t.hypotheses else "" for t in translate_lines(text.split("\n"), translator, greedy)
        )
        type_into(source, text)
        browser.execute_script("arguments[0].dataset.state = ''", target)
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda b: target.get_attribute("data-state") == "done")
        assert target.text == expected, text
    # Everything came from the page's own folder: no CDN, no Hub.
    outside = [u for u in requested_urls(browser) if not u.startswith((url, "data:", "blob:"))]
    assert outside == []

    type_into(source, "")
    browser.find_element(By.ID, "translate").click()
    assert browser.find_element(By.ID, "status").text == "Please type a German sentence to translate."


def test_the_web_page_command_refuses_a_non_model_and_a_used_folder(tmp_path, capsys):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "file").write_text("x")
    for model_dir, output_dir, expected in (
        (tmp_path, tmp_path / "new", f"--model {tmp_path}: the folder holds no model (no config.json"),
        (tiny_translator_dir(), tmp_path / "used", "is not empty: choose a new folder, or pass --overwrite"),
    ):
        assert cli.main(["web-page", "--model", str(model_dir), "--output_dir", str(output_dir)]) == 2
        assert expected in capsys.readouterr().err
