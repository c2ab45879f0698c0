"""Evaluating a trained run: loss/perplexity on its eval split, a prompt set's answers from
the base and the fine-tune, and lm-evaluation-harness tasks where `lm-eval` is installed.

`runner.run_eval` (torch-free, used by `tunelab eval` and `POST /api/runs/{id}/eval`)
checks the request, starts `python -m tunelab.evaluate.child` on a device the inference
rules allow, and stores each result with the run (`tunelab.store.evals`). The child
(`child`, `measure`, `harness`) is the only part that imports torch.
"""
