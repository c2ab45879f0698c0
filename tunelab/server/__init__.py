"""The HTTP surface of tunelab: a FastAPI app (REST + Server-Sent Events) and the web page.

`app.create_app` builds the application; `main.serve` runs it with uvicorn. This package
never imports torch, transformers, datasets or mlx: training happens in worker processes,
and the dataset preview in a short-lived child (`preview_child`).
"""
