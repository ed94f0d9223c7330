"""Dense matrices stored as lists of rows."""


class Matrix:
    def __init__(self, rows):
        self.rows = [list(row) for row in rows]
        if not self.rows or any(len(row) != len(self.rows[0]) for row in self.rows):
            raise ValueError("a matrix needs at least one row and rows of equal length")

    @classmethod
    def identity(cls, n):
        return cls([[1 if i == j else 0 for j in range(n)] for i in range(n)])

    @property
    def shape(self):
        return len(self.rows), len(self.rows[0])

    def __eq__(self, other):
        return isinstance(other, Matrix) and self.rows == other.rows

    def __repr__(self):
        return f"Matrix({self.rows})"

    def is_square(self):
        rows, cols = self.shape
        return rows == cols

    def transpose(self):
        n_rows, n_cols = self.shape
        return Matrix([[self.rows[r][c] for r in range(n_rows)] for c in range(n_cols)])

    def is_symmetric(self):
        return self.is_square() and self == self.transpose()

    def __matmul__(self, other):
        if self.shape[1] != other.shape[0]:
            raise ValueError(f"cannot multiply {self.shape} by {other.shape}")
        columns = other.transpose().rows
        return Matrix([[sum(a * b for a, b in zip(row, col)) for col in columns] for row in self.rows])

    def determinant(self):
        if not self.is_square():
            raise ValueError(f"determinant needs a square matrix, got {self.shape}")
        n = self.shape[0]
        if n == 1:
            return self.rows[0][0]
        total = 0
        for col in range(n):
            minor = Matrix([row[:col] + row[col + 1:] for row in self.rows[1:]])
            sign = -1 if col % 2 else 1
            total += sign * self.rows[0][col] * minor.determinant()
        return total
