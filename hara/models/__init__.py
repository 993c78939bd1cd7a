"""The embedded tiny Qwen3 family, its tokenizer and the base-model warm-up."""
