"""A small class-based fixture repository: the bugs synthesis injects land in methods, whose hidden
cases need a receiver (envs/tasks/synth/recorder_plugin.py)."""
import textwrap
from pathlib import Path

MODULE = textwrap.dedent('''\
    class Cart:
        def __init__(self, prices):
            self.prices = dict(prices)
            self.items = []

        def add(self, name, qty):
            if qty <= 0:
                return len(self.items)
            self.items.append([name, qty])
            return len(self.items)

        def total(self):
            s = 0
            for name, qty in self.items:
                s += self.prices[name] * qty
            return s

        def discounted(self, percent):
            return self.total() * (100 - percent) // 100


    class Meter:
        __slots__ = ("limit",)

        def __init__(self, limit):
            self.limit = limit

        def over(self, value):
            return value > self.limit

        def clip(self, value):
            if value > self.limit:
                return self.limit
            return value
''')

TESTS = textwrap.dedent('''\
    from shop.cart import Cart, Meter


    def test_add():
        cart = Cart({"a": 2})
        assert cart.add("a", 3) == 1
        assert cart.add("a", 0) == 1

    def test_total():
        cart = Cart({"a": 2, "b": 5})
        cart.add("a", 3)
        cart.add("b", 1)
        assert cart.total() == 11

    def test_discounted():
        cart = Cart({"a": 10})
        cart.add("a", 2)
        assert cart.discounted(50) == 10

    def test_over():
        meter = Meter(5)
        assert meter.over(6) and not meter.over(5)

    def test_clip():
        assert Meter(5).clip(9) == 5 and Meter(5).clip(3) == 3
''')


def make_class_fixture_repo(root: Path) -> Path:
    repo = root / "shoprepo"
    (repo / "shop").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "shop" / "__init__.py").write_text("")
    (repo / "shop" / "cart.py").write_text(MODULE)
    (repo / "tests" / "test_cart.py").write_text(TESTS)
    return repo
