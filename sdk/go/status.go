package fila

import "sync"

// ConnStatus is the state of a client's connection: of the client as a
// whole (Client.Status), or of its connection to one node (StatusEvent).
type ConnStatus uint8

// The states of a connection. A client starts connected (Connect returns
// once the first connection is up) and ends closed; in between, each lost
// connection goes from connected to disconnected, then, each time the
// client dials the node again, to reconnecting, and back to disconnected
// if that attempt fails, until it is connected again.
const (
	// StatusConnected: the connection is up and handshaken; requests go
	// through.
	StatusConnected ConnStatus = iota + 1
	// StatusDisconnected: the connection was lost, or the last attempt to
	// make it again failed, and no attempt is under way. The client dials
	// again, after its backoff (WithReconnect), as long as a call or an
	// open subscription needs the node; a call made meanwhile waits for
	// the connection, bounded by its context.
	StatusDisconnected
	// StatusReconnecting: the client is dialling the node again after
	// losing its connection.
	StatusReconnecting
	// StatusClosed: the client has ended, after Close or Shutdown, or
	// after a failure that reconnecting cannot cure (a refused API key,
	// or any lost connection with WithoutReconnect). It is final.
	StatusClosed
)

// String returns "connected", "disconnected", "reconnecting" or "closed".
func (s ConnStatus) String() string {
	switch s {
	case StatusConnected:
		return "connected"
	case StatusDisconnected:
		return "disconnected"
	case StatusReconnecting:
		return "reconnecting"
	case StatusClosed:
		return "closed"
	}
	return "unknown"
}

// StatusEvent is a change of a client's connection, as passed to the
// handler of WithStatusHandler.
type StatusEvent struct {
	// Status is the connection's new state.
	Status ConnStatus
	// Addr is the node ("host:port") whose connection changed; empty for
	// StatusClosed, which concerns the whole client.
	Addr string
	// Err says why, for StatusDisconnected and StatusClosed; it is nil
	// for the others. For StatusDisconnected it wraps ErrConnectionLost
	// and the failure (such as the read error, or ErrUnauthorized when
	// the broker closed the connection because the key was revoked), or
	// it is the error of the failed attempt to connect again (the dial's,
	// the TLS or protocol handshake's). For StatusClosed it is nil after
	// Close or Shutdown, else why the client ended, wrapping
	// ErrConnectionLost.
	Err error
}

// WithStatusHandler calls fn with every change of the client's
// connection: StatusConnected when a connection to a node is up (the
// first one included, before Connect returns), StatusDisconnected with the
// reason when it is lost and after each failed attempt to make it again,
// StatusReconnecting as each attempt starts, and StatusClosed, last, when
// the client ends. In a cluster each event names the node it concerns;
// Client.Status sums them up.
//
// fn runs on a goroutine of the client's that calls it with one event at
// a time, in order; a slow fn delays only the events after it, never the
// client's work. fn may call the client's methods, Close included. After
// StatusClosed, which may come after Close has returned, fn is not called
// again. If Connect fails, fn is not called at all.
func WithStatusHandler(fn func(StatusEvent)) Option {
	return func(o *options) { o.statusHandler = fn }
}

// Status returns the state of the client's connection:
//
//   - StatusConnected while a connection is up (in a cluster, to at least
//     one node);
//   - StatusReconnecting while none is up and the client is dialling a
//     node whose connection was lost;
//   - StatusDisconnected while none is up and no dial is under way: the
//     client dials again once its backoff ends, if a call or an open
//     subscription needs the node;
//   - StatusClosed once the client has ended (Close returns after it has).
//
// While the client is not connected, open subscriptions wait without
// delivering: with reconnection (the default) they are opened again once
// a connection is back, so a subscription that delivers nothing while
// Status is not StatusConnected does not mean its queue is empty.
func (c *Client) Status() ConnStatus { return ConnStatus(c.status.Load()) }

// statusEvents queues events from the owner goroutine, which never waits
// for the handler, and delivers them to it in order on a goroutine of
// their own, started once Connect succeeds.
type statusEvents struct {
	fn   func(StatusEvent)
	mu   sync.Mutex
	q    []StatusEvent
	wake chan struct{} // a post since the deliverer last looked
}

func newStatusEvents(fn func(StatusEvent)) *statusEvents {
	if fn == nil {
		return nil
	}
	return &statusEvents{fn: fn, wake: make(chan struct{}, 1)}
}

// post queues ev; it never blocks. A nil e (no handler) drops it.
func (e *statusEvents) post(ev StatusEvent) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.q = append(e.q, ev)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// start delivers the queued events, and those posted later, until the
// StatusClosed one.
func (e *statusEvents) start() {
	if e == nil {
		return
	}
	go func() {
		for {
			e.mu.Lock()
			q := e.q
			e.q = nil
			e.mu.Unlock()
			for _, ev := range q {
				e.fn(ev)
				if ev.Status == StatusClosed {
					return
				}
			}
			<-e.wake
		}
	}()
}

// setNode records a change of the connection to addr, updates the
// client's Status and posts the event. Runs on the owner goroutine.
func (l *loop) setNode(addr string, st ConnStatus, err error) {
	if l.nodeStatus == nil {
		l.nodeStatus = map[string]ConnStatus{}
	}
	l.nodeStatus[addr] = st
	sum := StatusDisconnected
	for _, s := range l.nodeStatus {
		if s == StatusConnected {
			sum = StatusConnected
			break
		}
		if s == StatusReconnecting {
			sum = StatusReconnecting
		}
	}
	l.c.status.Store(uint32(sum))
	l.c.events.post(StatusEvent{Status: st, Addr: addr, Err: err})
}

// closed records the client's end: Status is StatusClosed, and the last
// event is posted. err is why, nil after Close. Runs on the owner
// goroutine.
func (l *loop) closed(err error) {
	l.c.status.Store(uint32(StatusClosed))
	l.c.events.post(StatusEvent{Status: StatusClosed, Err: err})
}
