package main

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestCheckCertExpiry(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cert := func(cn string, notBefore, notAfter time.Time) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, NotBefore: notBefore, NotAfter: notAfter}
	}
	tests := []struct {
		name string
		cert *x509.Certificate
		want string // the log line's start and content; "" for no line
	}{
		{"valid for a year", cert("a", now.AddDate(0, 0, -1), now.AddDate(1, 0, 0)), ""},
		{"31 days left", cert("b", now.AddDate(0, 0, -1), now.AddDate(0, 0, 31)), ""},
		{"29 days left", cert("c", now.AddDate(0, 0, -1), now.AddDate(0, 0, 29)),
			`level=WARN msg="TLS certificate expires soon: renew it and restart" file=server.pem subject="CN=c" not_after=2026-03-30T12:00:00Z days_left=29`},
		{"expired", cert("d", now.AddDate(0, -2, 0), now.Add(-time.Hour)),
			`level=ERROR msg="TLS certificate has expired: clients will refuse it; renew it and restart" file=server.pem subject="CN=d" not_after=2026-03-01T11:00:00Z`},
		{"not valid yet", cert("e", now.Add(time.Hour), now.AddDate(1, 0, 0)),
			`level=ERROR msg="TLS certificate is not valid yet: clients will refuse it" file=server.pem subject="CN=e" not_after=2027-03-01T12:00:00Z not_before=2026-03-01T13:00:00Z`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				},
			}))
			checkCertExpiry(log, "server.pem", []*x509.Certificate{tt.cert}, now)
			if got := strings.TrimSpace(buf.String()); got != tt.want {
				t.Errorf("checkCertExpiry logged\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
