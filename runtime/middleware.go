package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// HandleFunc is a delivery's handling as middleware sees it: msg is the
// decoded message, of the handler's type (an Order for a Handler[Order], a
// RawRecord for a raw subscriber). A middleware may pass next another value
// of that type; a value of another type is rejected, never handed over.
type HandleFunc func(ctx context.Context, d Delivery, msg any) Outcome

// Middleware wraps a delivery's handling: it sees the handler's context,
// the Delivery and the decoded message before the handler runs, and the
// Outcome after; it may change the context or the outcome, or return an
// outcome without calling next (a reject, say). Middleware set on the
// broker (WithMiddleware) runs outside middleware set for one
// subscription (WithStreamMiddleware, then Use); within each, the first
// added runs outermost. A record that does not decode is given up before
// any middleware runs.
//
// Whatever is set, the runtime keeps its own Recover around the whole
// chain (a panicking middleware retries the record) and around the
// handler itself (so middleware sees a panicking handler's Retry).
// Generated Mount functions need no change: WithMiddleware and
// WithStreamMiddleware reach their subscriptions through the broker.
type Middleware func(next HandleFunc) HandleFunc

// WithMiddleware wraps the handling of every subscription of the broker;
// the first given runs outermost.
func WithMiddleware(mw ...Middleware) Option {
	return func(c *config) { c.middleware = append(c.middleware, mw...) }
}

// WithStreamMiddleware wraps the handling of the broker's subscription to
// stream (a generated Mount's, for one), inside the broker's middleware.
func WithStreamMiddleware(stream string, mw ...Middleware) Option {
	return func(c *config) {
		if c.streamMiddleware == nil {
			c.streamMiddleware = make(map[string][]Middleware)
		}
		c.streamMiddleware[stream] = append(c.streamMiddleware[stream], mw...)
	}
}

// Use wraps this subscription's handling, inside the broker's middleware
// and WithStreamMiddleware's.
func Use(mw ...Middleware) SubscribeOption {
	return func(s *subscribeSettings) { s.middleware = append(s.middleware, mw...) }
}

// chainFor returns the middleware of a subscription to stream, outermost
// first, without nils.
func chainFor(cfg *config, stream string, own []Middleware) []Middleware {
	var out []Middleware
	for _, list := range [][]Middleware{cfg.middleware, cfg.streamMiddleware[stream], own} {
		for _, m := range list {
			if m != nil {
				out = append(out, m)
			}
		}
	}
	return out
}

// wrap builds the handling of a message of type M through chain: the
// runtime's Recover innermost, then chain's middleware, the first
// outermost.
func wrap[M any](h Handler[M], chain []Middleware) HandleFunc {
	var f HandleFunc = func(ctx context.Context, d Delivery, msg any) Outcome {
		m, ok := msg.(M)
		if !ok {
			var want M
			return Reject(fmt.Errorf("middleware passed the handler a %T, not the %T it takes", msg, want))
		}
		return h(ctx, m, d)
	}
	f = Recover(nil)(f)
	for i := len(chain) - 1; i >= 0; i-- {
		f = chain[i](f)
	}
	return f
}

// Recover turns a panic below it into a Retry (counted against the
// subscription's retries like any other) and logs it at Error with its
// stack, to l, or to the subscription's logger when l is nil. The runtime
// always recovers both around the handler and around all middleware;
// Recover is for middleware of one's own that should see a panic of the
// middleware it wraps as an outcome.
func Recover(l *slog.Logger) Middleware {
	return func(next HandleFunc) HandleFunc {
		return func(ctx context.Context, d Delivery, msg any) (out Outcome) {
			defer func() {
				if p := recover(); p != nil {
					out = panicked(ctx, l, d, p)
				}
			}()
			return next(ctx, d, msg)
		}
	}
}

// panicked logs a recovered panic p of d's handling and returns its Retry.
func panicked(ctx context.Context, l *slog.Logger, d Delivery, p any) Outcome {
	if l == nil {
		l = handlingLogger(ctx)
	}
	l.Error("handler panicked; retrying the record",
		"shard", d.ShardID, "sequence", d.SequenceNumber, "attempt", d.Attempt,
		"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return Outcome{kind: outcomeRetry, err: fmt.Errorf("handler panicked: %v", p)}
}

// ErrHandlerTimeout is the cause of the Retry of a delivery whose handling
// outlived Timeout's limit.
var ErrHandlerTimeout = errors.New("handler timed out")

// Timeout gives each delivery's handling below it at most d: its context
// is cancelled then, and whatever it returns after that counts as a Retry
// (its cause matches ErrHandlerTimeout and context.DeadlineExceeded), so
// the record is delivered again, and given up once its retries are spent.
// A handler that ignores its context still runs to its end: a lane never
// abandons a delivery. A non-positive d sets no limit.
func Timeout(d time.Duration) Middleware {
	return func(next HandleFunc) HandleFunc {
		if d <= 0 {
			return next
		}
		return func(ctx context.Context, dl Delivery, msg any) Outcome {
			tctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			out := next(tctx, dl, msg)
			if errors.Is(tctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
				return Outcome{kind: outcomeRetry, err: fmt.Errorf("%w after %s: %w", ErrHandlerTimeout, d, context.DeadlineExceeded)}
			}
			return out
		}
	}
}

// LogOutcomes logs every delivery's outcome as the middleware below it
// returned it, with its shard, sequence number, attempt, duration and
// error: an Ack at Debug, a Retry at Warn, a Reject at Error. It logs to l,
// or to the subscription's logger (stream, handler and owner on every
// line) when l is nil. The key and payload are never logged.
func LogOutcomes(l *slog.Logger) Middleware {
	return func(next HandleFunc) HandleFunc {
		return func(ctx context.Context, d Delivery, msg any) Outcome {
			began := time.Now()
			out := next(ctx, d, msg)
			log := l
			if log == nil {
				log = handlingLogger(ctx)
			}
			level := slog.LevelDebug
			switch out.kind {
			case outcomeRetry:
				level = slog.LevelWarn
			case outcomeReject:
				level = slog.LevelError
			}
			if !log.Enabled(ctx, level) {
				return out
			}
			attrs := []slog.Attr{
				slog.String("shard", d.ShardID), slog.String("sequence", d.SequenceNumber),
				slog.Int("attempt", d.Attempt), slog.String("outcome", out.String()),
				slog.Duration("duration", time.Since(began)),
			}
			if l != nil {
				attrs = append(attrs, slog.String("stream", d.Stream))
			}
			if out.err != nil {
				attrs = append(attrs, slog.Any("error", out.err))
			}
			log.LogAttrs(ctx, level, "handled", attrs...)
			return out
		}
	}
}
