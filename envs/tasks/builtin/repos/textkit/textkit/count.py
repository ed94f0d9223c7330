"""Counting words and characters."""


def word_count(text):
    """Number of whitespace-separated words."""
    return len(text.split())


def char_frequencies(text, ignore_case=True):
    """Map each non-space character to how often it occurs."""
    counts = {}
    for char in text:
        if char.isspace():
            continue
        key = char.lower() if ignore_case else char
        counts[key] = counts.get(key, 0) + 1
    return counts


def most_common(text, n=1):
    """The n most frequent words, most frequent first, ties broken alphabetically."""
    counts = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [word for word, _ in ranked[:n]]
