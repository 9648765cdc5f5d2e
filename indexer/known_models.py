"""What notes-search knows of embedding models by their names: how many tokens each reads per
input, and which share the local engine's tokenizer. A config names a model; these tables turn
the name into the window its chunks are cut to and into how that window is counted."""

from __future__ import annotations

# Tokens a model reads per input, by a part of its name (lowercase, without an Ollama tag or
# an organisation), from the model cards: what a server reads of a longer text is cut off.
# The first entry found in the name counts, so a longer name goes before a part of it
# (nomic-embed-text-v2-moe reads 512, nomic-embed-text v1.5 8192). Ollama reads at most its
# context (num_ctx, 2048 unless a Modelfile sets more), whatever the model could read.
KNOWN_WINDOWS = (
    ("multilingual-e5", 512),
    ("e5-", 512),
    ("nomic-embed-text-v2", 512),
    ("nomic-embed-text", 8192),
    ("bge-m3", 8192),
    ("bge-", 512),
    ("mxbai-embed-large", 512),
    ("snowflake-arctic-embed2", 8192),
    ("snowflake-arctic-embed-l-v2", 8192),
    ("snowflake-arctic-embed", 512),
    ("all-minilm", 256),
    ("paraphrase-multilingual", 128),  # sentence-transformers' max_seq_length: trained on 128
    ("gte-", 512),
    ("text-embedding-3", 8191),
    ("text-embedding-ada-002", 8191),
)
# Models whose tokenizer is XLM-R's SentencePiece vocabulary (tokenizer_config: XLMRobertaTokenizer),
# the one the local engine bundles: a server's windows of them are counted exactly. Matched by the
# whole name (without an organisation, also one written into it, as Ollama's community models
# do): a derivative named after one may carry a pruned vocabulary that splits words further
# (bge-m3_en_ru, USER-bge-m3), and a fine-tune is counted by the estimate, which bounds it.
XLM_R_MODELS = frozenset(
    {
        "multilingual-e5-small",
        "multilingual-e5-base",
        "multilingual-e5-large",
        "multilingual-e5-large-instruct",
        "bge-m3",
        "snowflake-arctic-embed2",
        "snowflake-arctic-embed-l-v2.0",
        "paraphrase-multilingual",  # Ollama's paraphrase-multilingual-mpnet-base-v2
        "paraphrase-multilingual-mpnet-base-v2",
        "nomic-embed-text-v2-moe",
    }
)
_MODEL_ORGANISATIONS = ("intfloat-", "baai-", "snowflake-", "sentence-transformers-", "nomic-ai-")
OLLAMA_DEFAULT_CONTEXT = 2048
UNKNOWN_MODEL_WINDOW = 512  # the smallest window common embedding models have: nothing is cut
# The local engine reads 512 tokens, but cuts a longer chunk into windows of 384 (exact counts):
# a question is about one part of a long chunk, which a shorter window dilutes less, and
# attention's cost grows with the square of the length (on the mixed notes hybrid MRR@10
# 0.840 -> 0.857 and the vector half's recall@5 0.840 -> 0.861; embedding CPU 0.92x for 4 %
# more tokens: bench/EVAL.md, "Chunks longer than the model reads"). A server's windows, cut by
# the conservative estimate, come out near this size in real tokens.
LOCAL_WINDOW = 384


def known_window(provider: str, model: str) -> int:
    """The window of a known model (KNOWN_WINDOWS), Ollama's default context at most; else
    UNKNOWN_MODEL_WINDOW."""
    if provider == "local":
        return LOCAL_WINDOW
    name = _model_name(model)
    window = next((tokens for part, tokens in KNOWN_WINDOWS if part in name), UNKNOWN_MODEL_WINDOW)
    return min(window, OLLAMA_DEFAULT_CONTEXT) if provider == "ollama" else window


def uses_xlm_r_vocabulary(model: str) -> bool:
    """Whether `model` is one of XLM_R_MODELS, whose tokens the bundled tokenizer counts exactly."""
    name = _model_name(model)
    names = {name, *(name.removeprefix(organisation) for organisation in _MODEL_ORGANISATIONS)}
    return not names.isdisjoint(XLM_R_MODELS)


def _model_name(model: str) -> str:
    """A model's name without its organisation or Ollama tag, lowercase."""
    return model.rsplit("/", 1)[-1].split(":", 1)[0].lower()
