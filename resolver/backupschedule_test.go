package resolver

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

const scheduleEnvFile = "clusters/local/environments/dev/environment.cue"

// loadSchedule loads the example repository with dev's backups.schedule
// set to schedule.
func loadSchedule(t *testing.T, schedule string) error {
	t.Helper()
	dir := exampleCopy(t)
	writeFile(t, dir, scheduleEnvFile, "namespacePrefix: \"dev\"\nbackupLocation: \"s3://backups/local/dev\"\nbackups: schedule: "+cueString(schedule)+"\n")
	_, err := NewLoader(0).Load(os.DirFS(dir))
	return err
}

func cueString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// TestBackupScheduleRefusesWhatRunsTooOftenOrNever pins that a schedule
// running more than once an hour, at an @every interval or never (or
// only in leap years) is a ConfigError naming the file, backups.schedule,
// the value and what is expected. The agent makes a backup at every run,
// superseding the one before that has not ended: @every 1m started one a
// minute and let none finish; "0 3 31 2 *" silently made none.
func TestBackupScheduleRefusesWhatRunsTooOftenOrNever(t *testing.T) {
	for _, tc := range []struct {
		schedule string
		want     string
	}{
		{"@every 1s", "@every"},
		{"@every 1m", "@every"},
		{"@every 24h", "@every"},
		{"* * * * *", "runs at 60 minutes of the hour"},
		{"*/5 * * * *", "runs at 12 minutes of the hour"},
		{"0,30 3 * * *", "runs at 2 minutes of the hour"},
		{"0 3 31 2 *", "never runs"},
		{"0 3 30,31 2 *", "never runs"},
		{"0 3 31 4,6,9,11 *", "never runs"},
		{"0 3 29 2 *", "only on 29 February"},
		{", 0 1 1 0", "its minute field matches none"}, // found by FuzzBackupSchedule
		{"0 3 * 1 ,", "its day-of-week field matches none"},
		{"0 3 , 1 *", "no month it allows has a day of the month"},
		{"TZ=Europe/Berlin 0 3 * * *", "time zone prefix"},
		{"TZ=UTC", "time zone prefix"}, // the parser panics on it
		{"CRON_TZ=UTC 0 3 * * *", "time zone prefix"},
		{"@nightly", "no cron expression"},
		{"0 0 3 * * *", "five fields"},
	} {
		t.Run(tc.schedule, func(t *testing.T) {
			err := loadSchedule(t, tc.schedule)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *ConfigError", err)
			}
			if ce.File != scheduleEnvFile || ce.Field != "backups.schedule" {
				t.Errorf("error names %s, field %s; want %s, backups.schedule", ce.File, ce.Field, scheduleEnvFile)
			}
			for _, want := range []string{fmt.Sprintf("%q", tc.schedule), tc.want, "expected"} {
				if !strings.Contains(ce.Msg, want) {
					t.Errorf("message lacks %q:\n%s", want, ce.Msg)
				}
			}
		})
	}
}

// TestBackupScheduleAcceptsCronAndDescriptors: five cron fields running
// at most hourly and at least yearly, and every descriptor but @every.
func TestBackupScheduleAcceptsCronAndDescriptors(t *testing.T) {
	for _, s := range []string{
		"0 3 * * *", "15 */6 * * *", "0 * * * *", "0 3 * * 0", "0 3 1 * *", "0 3 1 1 *",
		"0 3 28 2 *", "0 3 29,30 1,2 *", "0 3 31 2 1", // 31 February or any Monday of it: crontab's "or"
		"0 3 1 1 ,", // the first of January, as the day of the week matches none
		"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly",
	} {
		if err := CheckBackupSchedule(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	if err := loadSchedule(t, "@daily"); err != nil {
		t.Errorf("the example repository with @daily: %v", err)
	}
}

// FuzzBackupSchedule pins what CheckBackupSchedule promises the agent:
// it never panics, and a schedule it accepts parses, runs within 366
// days of any moment and never twice within an hour.
func FuzzBackupSchedule(f *testing.F) {
	for _, s := range []string{
		"0 3 * * *", "@hourly", "@daily", "@every 1m", "@every 1s", "* * * * *", "*/5 * * * *",
		"0 3 31 2 *", "0 3 29 2 *", "0 3 31 2 1", "0 3 1 1 *", "59 23 31 12 *", "0 0 1-7 * 1",
		"TZ=UTC", "CRON_TZ=Europe/Berlin 0 3 * * *", "", "@", "0 0 ? * ?", "0-59/60 * * * *", ", 0 1 1 0", "0 3 , * 1",
	} {
		f.Add(s)
	}
	starts := []time.Time{
		time.Date(2023, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 1, 3, 0, 1, 0, time.UTC), // a leap year's 366 days
		time.Date(2099, 3, 1, 0, 0, 0, 0, time.UTC), // 2100 is no leap year
		time.Date(2027, 12, 31, 23, 59, 0, 0, time.UTC),
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckBackupSchedule(s) != nil {
			return
		}
		sched, err := cron.ParseStandard(s)
		if err != nil {
			t.Fatalf("%q accepted, but the agent's parser says %v", s, err)
		}
		for _, start := range starts {
			next := sched.Next(start)
			if next.IsZero() || next.After(start.AddDate(0, 0, 366)) {
				t.Fatalf("%q accepted, but its next run after %s is %s", s, start, next)
			}
			prev := next
			for range 30 {
				n := sched.Next(prev)
				if n.IsZero() || n.Sub(prev) < time.Hour || n.After(prev.AddDate(0, 0, 366)) {
					t.Fatalf("%q accepted, but it runs at %s and next at %s", s, prev, n)
				}
				prev = n
			}
		}
	})
}
