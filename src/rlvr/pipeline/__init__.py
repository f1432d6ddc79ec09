"""Multi-stage recipes: SFT, GRPO, rejection sampling, filtering and evaluation as one pipeline.

`spec` parses and checks a pipeline file (or a built-in recipe in `recipes/`), `runner` runs
it resumably and writes the stage table, `stages` holds what each stage kind runs.
"""
