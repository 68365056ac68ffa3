"""Serve a trained model over HTTP: LibreTranslate's API, a native batch route, health and metrics, with sentences of
concurrent requests batched together (`hf-vanilla-transformer serve`, docs/serving.md)."""
