"""Immutable n-dimensional vectors."""
import math


class Vector:
    def __init__(self, *components):
        self.components = tuple(components)

    def __len__(self):
        return len(self.components)

    def __eq__(self, other):
        return isinstance(other, Vector) and self.components == other.components

    def __repr__(self):
        return f"Vector{self.components}"

    def _check_same_size(self, other):
        if len(self) != len(other):
            raise ValueError(f"size mismatch: {len(self)} vs {len(other)}")

    def __add__(self, other):
        self._check_same_size(other)
        return Vector(*(a + b for a, b in zip(self.components, other.components)))

    def __sub__(self, other):
        self._check_same_size(other)
        return Vector(*(a - b for a, b in zip(self.components, other.components)))

    def scale(self, factor):
        return Vector(*(factor * c for c in self.components))

    def dot(self, other):
        self._check_same_size(other)
        return sum(a * b for a, b in zip(self.components, other.components))

    def norm(self):
        return math.sqrt(self.dot(self))

    def normalized(self):
        length = self.norm()
        if length == 0:
            raise ZeroDivisionError("cannot normalize the zero vector")
        unit = self.scale(1 / length)
        return unit


def angle_between(a, b):
    """Angle between two non-zero vectors, in degrees."""
    cosine = a.dot(b) / (a.norm() * b.norm())
    cosine = max(-1.0, min(1.0, cosine))
    return math.acos(cosine) * 180 / math.pi
