import pytest

from inventory.store import Inventory


def make_inventory():
    inv = Inventory()
    inv.add("apple", 10, 0.5)
    inv.add("pear", 3, 1.0)
    return inv


def test_add_and_quantity():
    inv = make_inventory()
    assert inv.quantity("apple") == 10
    assert inv.quantity("kiwi") == 0


def test_restock_accumulates():
    inv = make_inventory()
    inv.add("apple", 5, 0.5)
    assert inv.quantity("apple") == 15


def test_remove_returns_remaining():
    inv = make_inventory()
    assert inv.remove("apple", 4) == 6
    assert inv.quantity("apple") == 6


def test_remove_too_many_raises():
    with pytest.raises(ValueError):
        make_inventory().remove("pear", 4)


def test_total_value():
    assert make_inventory().total_value() == pytest.approx(8.0)


def test_low_stock_includes_threshold():
    inv = make_inventory()
    inv.add("plum", 5, 2.0)
    assert inv.low_stock(5) == ["pear", "plum"]
