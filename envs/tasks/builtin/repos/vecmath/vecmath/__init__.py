"""Small vectors and matrices in pure Python."""
