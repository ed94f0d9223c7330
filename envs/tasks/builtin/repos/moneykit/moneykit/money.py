"""Money amounts stored as integer cents, one currency per amount."""


class Money:
    def __init__(self, cents, currency="USD"):
        self.cents = cents
        self.currency = currency

    @classmethod
    def parse(cls, text, currency="USD"):
        """"12.34" -> 1234 cents; "7" -> 700; "3.5" -> 350; "-0.25" -> -25."""
        text = text.strip()
        negative = text.startswith("-")
        if negative:
            text = text[1:]
        whole, _, fraction = text.partition(".")
        if len(fraction) > 2:
            raise ValueError(f"more than two decimals in {text!r}")
        cents = int(whole or "0") * 100 + int(fraction.ljust(2, "0"))
        return cls(-cents if negative else cents, currency)

    def __eq__(self, other):
        return isinstance(other, Money) and self.cents == other.cents and self.currency == other.currency

    def __repr__(self):
        return f"Money({self.cents}, {self.currency!r})"

    def __str__(self):
        sign = "-" if self.cents < 0 else ""
        whole, cents = divmod(abs(self.cents), 100)
        return f"{sign}{whole}.{cents:02d} {self.currency}"

    def same_currency(self, other):
        return self.currency == other.currency

    def __add__(self, other):
        if not self.same_currency(other):
            raise ValueError(f"cannot add {other.currency} to {self.currency}")
        return Money(self.cents + other.cents, self.currency)

    def allocate(self, ratios):
        """Split into parts proportional to `ratios`; leftover cents go to the first parts."""
        total = sum(ratios)
        shares = [self.cents * ratio // total for ratio in ratios]
        remainder = self.cents - sum(shares)
        for index in range(remainder):
            shares[index] += 1
        return [Money(share, self.currency) for share in shares]
