"""A bounded LIFO stack."""


class StackFull(Exception):
    """Raised when pushing onto a stack at capacity."""


class StackEmpty(Exception):
    """Raised when popping or peeking an empty stack."""


class Stack:
    def __init__(self, capacity):
        self.capacity = capacity
        self._items = []

    def push(self, item):
        if len(self._items) >= self.capacity:
            raise StackFull(f"stack is full (capacity {self.capacity})")
        self._items.append(item)

    def pop(self):
        if not self._items:
            raise StackEmpty("pop from empty stack")
        return self._items.pop()

    def peek(self):
        if not self._items:
            raise StackEmpty("peek at empty stack")
        return self._items[-1]

    def __len__(self):
        return len(self._items)
