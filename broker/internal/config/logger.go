package config

import (
	"io"
	"log/slog"
)

// Logger returns a logger writing to w in c.Log.Format (text: key=value
// pairs; json: one object), one line per event, dropping events below
// c.Log.Level. By convention broker packages add the attributes "queue" and
// "key" (a fairness or throttle key) to events that concern one, and a
// client connection's events carry "conn", "remote", "client" and
// "key_id" from its logger; no attribute is added twice to one line.
func (c Config) Logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.Log.Level}
	if c.Log.Format == FormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
