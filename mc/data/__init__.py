"""Data for MegaContext: byte tokenizer, stdlib / local-file corpora, the recall task, loaders.

One concern per module: ``tokenizer`` (bytes <-> ids), ``hf_tokenizer`` (a model=hf base's tokenizer), ``split`` (stable train/val rule and
fingerprints), ``stdlib_corpus`` (finding the default corpus), ``documents`` (lazy document
sets), ``local_files`` (.txt/.jsonl/.parquet), ``recall`` (the generated recall task),
``loader`` (windows, sources, the stage-2 mix).
"""
from mc.data.documents import DocumentSet
from mc.data.loader import (CorpusSource, RecallSource, Stage2Batch, Stage2Sampler, TokenStream,
                            make_source, make_stage2_sampler, sample_batch)
from mc.data.local_files import TextDocument, load_documents, load_texts
from mc.data.recall import (RecallBatch, RecallDoc, exact_recall, make_recall_doc, recall_batch,
                            span_blocks)
from mc.data.split import is_val, split_indices, stable_fraction
from mc.data.stdlib_corpus import corpus_fingerprint, split_files, stdlib_files, stdlib_root
from mc.data.tokenizer import ByteTokenizer, decode, encode

__all__ = [
    "ByteTokenizer", "encode", "decode",
    "stdlib_root", "stdlib_files", "split_files", "corpus_fingerprint",
    "stable_fraction", "is_val", "split_indices",
    "DocumentSet", "TextDocument", "load_documents", "load_texts",
    "RecallDoc", "RecallBatch", "make_recall_doc", "recall_batch", "exact_recall", "span_blocks",
    "TokenStream", "CorpusSource", "RecallSource", "make_source", "sample_batch",
    "Stage2Batch", "Stage2Sampler", "make_stage2_sampler",
]
