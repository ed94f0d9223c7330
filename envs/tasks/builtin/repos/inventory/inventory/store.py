"""Stock levels and value of an inventory."""


class Inventory:
    def __init__(self):
        self._stock = {}
        self._prices = {}

    def add(self, sku, quantity, unit_price):
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        self._stock[sku] = self._stock.get(sku, 0) + quantity
        self._prices[sku] = unit_price

    def remove(self, sku, quantity):
        """Take quantity units out; returns how many are left."""
        available = self._stock.get(sku, 0)
        if quantity > available:
            raise ValueError(f"only {available} of {sku} in stock")
        remaining = available - quantity
        if remaining == 0:
            del self._stock[sku]
        else:
            self._stock[sku] = remaining
        return remaining

    def quantity(self, sku):
        return self._stock.get(sku, 0)

    def total_value(self):
        return sum(qty * self._prices[sku] for sku, qty in self._stock.items())

    def low_stock(self, threshold):
        """SKUs whose quantity is at or below threshold, sorted."""
        return sorted(sku for sku, qty in self._stock.items() if qty <= threshold)
