"""Why a word is missing: an adapter's ``missing_words`` (word -> reason) turned into the end of
the sentence a skipped record gives. Here, not in base.py, so that the word-group modules
(optimizer_words, data_words), which base.py imports, can say it too."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def missing_because(cls: type, words: Iterable[str]) -> str:
    """:meth:`Adapter.missing_because` for any class that may declare ``missing_words`` (the
    word-group mixins call it on the adapter class they are mixed into)."""
    declared: Mapping[str, str] = getattr(cls, "missing_words", {})
    reasons = [(w, declared[w]) for w in sorted(set(words)) if declared.get(w)]
    if not reasons:
        return ""
    if len(reasons) == 1:
        return f": {reasons[0][1]}"
    return ": " + "; ".join(f"{w}: {why}" for w, why in reasons)
