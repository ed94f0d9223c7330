"""A bounded stack and a stock-keeping inventory."""
