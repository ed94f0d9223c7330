import pytest

from inventory.stack import Stack, StackEmpty, StackFull


def test_push_pop_order():
    stack = Stack(3)
    stack.push(1)
    stack.push(2)
    assert stack.pop() == 2
    assert stack.pop() == 1


def test_pop_empty_raises():
    with pytest.raises(StackEmpty):
        Stack(1).pop()


def test_push_beyond_capacity_raises():
    stack = Stack(2)
    stack.push("a")
    stack.push("b")
    with pytest.raises(StackFull):
        stack.push("c")
    assert len(stack) == 2


def test_peek_returns_top():
    stack = Stack(3)
    stack.push("bottom")
    stack.push("top")
    assert stack.peek() == "top"
    assert len(stack) == 2
