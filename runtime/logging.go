package runtime

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"log/slog"
)

// defaultLogHandler sends warnings and errors to slog.Default(), as it is
// when a line is logged (so an application may set its default logger
// after NewBroker): a new user sees a dead letter, a lost lease or a
// failing call without configuring anything. WithLogger replaces it.
type defaultLogHandler struct {
	ops []func(slog.Handler) slog.Handler // WithAttrs and WithGroup, in order
}

func (h defaultLogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn && slog.Default().Handler().Enabled(ctx, level)
}

func (h defaultLogHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.Default().Handler()
	for _, op := range h.ops {
		out = op(out)
	}
	return out.Handle(ctx, r)
}

func (h defaultLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.with(func(o slog.Handler) slog.Handler { return o.WithAttrs(attrs) })
}

func (h defaultLogHandler) WithGroup(name string) slog.Handler {
	return h.with(func(o slog.Handler) slog.Handler { return o.WithGroup(name) })
}

func (h defaultLogHandler) with(op func(slog.Handler) slog.Handler) slog.Handler {
	ops := make([]func(slog.Handler) slog.Handler, len(h.ops), len(h.ops)+1)
	copy(ops, h.ops)
	return defaultLogHandler{ops: append(ops, op)}
}

// keyDigest names a partition key in logs without the key itself (it may
// be a customer's e-mail address or an account number): the MD5 of it, the
// same digest a dead letter's derived key carries, so an operator who knows
// the key can find its lines.
func keyDigest(key string) string {
	sum := md5.Sum([]byte(key))
	return hex.EncodeToString(sum[:])
}
