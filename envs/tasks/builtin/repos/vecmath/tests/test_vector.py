import pytest

from vecmath.vector import Vector, angle_between


def test_equality():
    assert Vector(1, 2) == Vector(1, 2)
    assert Vector(1, 2) != Vector(2, 1)
    assert Vector(1, 2) != (1, 2)


def test_add():
    assert Vector(1, 2) + Vector(3, 4) == Vector(4, 6)


def test_subtract():
    assert Vector(5, 7) - Vector(1, 2) == Vector(4, 5)


def test_size_mismatch_raises():
    with pytest.raises(ValueError):
        Vector(1, 2) + Vector(1, 2, 3)


def test_dot_and_norm():
    assert Vector(1, 2, 3).dot(Vector(4, 5, 6)) == 32
    assert Vector(3, 4).norm() == 5


def test_normalized():
    assert Vector(3, 4).normalized().components == pytest.approx((0.6, 0.8))


def test_normalize_zero_raises():
    with pytest.raises(ZeroDivisionError):
        Vector(0, 0).normalized()


def test_angle_between():
    assert angle_between(Vector(1, 0), Vector(0, 1)) == pytest.approx(90.0)
    assert angle_between(Vector(1, 0), Vector(-1, 0)) == pytest.approx(180.0)


def test_angle_between_parallel():
    assert angle_between(Vector(3, 0), Vector(1, 0)) == pytest.approx(0.0)
