package stfq

// heapLen is exported to tests through a helper in the _test package.
func HeapLenForTest[T Node[T]](s *Scheduler[T]) int { return len(s.heap) }
