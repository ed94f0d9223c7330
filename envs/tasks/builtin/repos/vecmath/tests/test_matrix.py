import pytest

from vecmath.matrix import Matrix


def test_ragged_rows_raise():
    with pytest.raises(ValueError):
        Matrix([[1, 2], [3]])


def test_identity():
    assert Matrix.identity(2) == Matrix([[1, 0], [0, 1]])
    assert Matrix.identity(3).shape == (3, 3)


def test_transpose_square():
    assert Matrix([[1, 2], [3, 4]]).transpose() == Matrix([[1, 3], [2, 4]])


def test_transpose_rectangular():
    assert Matrix([[1, 2, 3], [4, 5, 6]]).transpose() == Matrix([[1, 4], [2, 5], [3, 6]])


def test_is_symmetric():
    assert Matrix([[1, 2], [2, 1]]).is_symmetric()


def test_non_symmetric_matrices():
    assert not Matrix([[1, 2], [3, 4]]).is_symmetric()
    assert not Matrix([[1, 2, 3]]).is_symmetric()


def test_matmul():
    a = Matrix([[1, 2], [3, 4]])
    b = Matrix([[5, 6], [7, 8]])
    assert a @ b == Matrix([[19, 22], [43, 50]])
    assert a @ Matrix.identity(2) == a


def test_matmul_shape_mismatch_raises():
    with pytest.raises(ValueError):
        Matrix([[1, 2]]) @ Matrix([[1, 2]])


def test_determinant():
    assert Matrix([[3]]).determinant() == 3
    assert Matrix([[1, 2], [3, 4]]).determinant() == -2
    assert Matrix([[2, 0, 1], [1, 3, 2], [1, 1, 2]]).determinant() == 6


def test_determinant_of_non_square_raises():
    with pytest.raises(ValueError):
        Matrix([[1, 2, 3]]).determinant()
