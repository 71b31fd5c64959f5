"""The allowed values of the configuration's choice fields, one tuple per field (re-exported by :mod:`mc.config`).

Their own module so that :mod:`mc.config` holds the schemas alone; :mod:`mc.config_checks` validates against these.
"""
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune-no-cudagraphs")
FREEZE_MODES = ("fail", "warn", "off")
DATA_SOURCES = ("stdlib", "files", "recall")
ALLOCATOR_POLICIES = ("relative", "absolute")
POSITION_MODES = ("global", "bounded", "entries", "slots")  # mc.positions (mc/positions.py)
LONG_TASKS = ("passkey", "multi_needle")  # mc.data.long_tasks
HAYSTACKS = ("words", "corpus")  # mc.data.haystack: what surrounds generated records
RECALL_FORMS = ("record", "sentence")  # data.recall.form: mc.data.recall / mc.data.sentence_recall
LONG_RANGE_VARIANTS = ("recency", "compressed", "focused", "random", "salience", "oracle")
TASK_SUITE_TASKS = ("passkey", "multikey", "multivalue", "vartrack")  # mc.data.real_tasks
# full: the base over the whole history (where it fits model.max_seq_len); salience: a non-learned locator
TASK_SUITE_VARIANTS = ("full", "recency", "compressed", "focused", "random", "salience", "oracle")
DEVICES = ("auto", "cpu", "cuda")
GIST_POOLINGS = ("mean_mlp", "query")
GIST_OUTPUT_NORMS = ("free", "tokens")  # gistnet.output_norm (obsidian GistNet)
INDEX_QUERIES = ("pooled", "twin", "lexical", "overlap")  # lensnet.index_query (mc.nets.token_index)
BENCH_CASES = ("lensnet", "train", "tree", "session", "decode", "refocus")
BASE_SOURCES = ("gpt", "hf")  # model.source: the built-in GPT or a Hugging Face causal LM (mc/nets/hf_base.py)
HF_DTYPES = ("float32", "bfloat16", "float16")  # model.hf_dtype
