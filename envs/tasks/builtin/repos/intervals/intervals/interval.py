"""Closed numeric intervals [start, end]."""


class Interval:
    def __init__(self, start, end):
        if start > end:
            raise ValueError(f"start {start} is after end {end}")
        self.start = start
        self.end = end

    def __eq__(self, other):
        return (self.start, self.end) == (other.start, other.end)

    def __repr__(self):
        return f"Interval({self.start}, {self.end})"

    def length(self):
        return self.end - self.start

    def contains(self, value):
        return self.start <= value <= self.end

    def overlaps(self, other):
        return self.start <= other.end and other.start <= self.end


def merge(intervals):
    """Merge overlapping or touching intervals; result sorted by start."""
    merged = []
    for iv in sorted(intervals, key=lambda iv: iv.start):
        if merged and iv.start <= merged[-1].end:
            merged[-1] = Interval(merged[-1].start, max(merged[-1].end, iv.end))
        else:
            merged.append(Interval(iv.start, iv.end))
    return merged
