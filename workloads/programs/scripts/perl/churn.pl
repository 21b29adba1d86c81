#!/usr/bin/perl
# Hash, array, string and regex churn in Perl.
#
# Usage: perl churn.pl N
#
# N synthetic log lines are formatted with sprintf, parsed back with a regex
# of captures, checked against the fields they were made from, and folded
# into aggregates: a count per host and per status (small hashes), a list of
# paths per user (a hash of arrays, pushed to and trimmed with splice), and a
# session table, a hash of hashes that grows and shrinks in waves (insert,
# update, delete). Each line also goes through string operations that make new
# strings: split and join, lc/uc, substr, reverse, tr///, s///g. Every 2000
# lines the session table is walked in sorted key order and a report string is
# built, and a queue array is shifted and pushed.
#
# Output: counts, sizes and the MD5 of every line plus a canonical dump of the
# aggregates (hash keys always sorted: Perl's hash order is randomized per
# process). All choices come from an inline 31-bit LCG seeded from N, so the
# output depends on N only. Exits with status 1 when a parsed line does not
# give back its fields or a size cross-check fails.
use strict;
use warnings;
use Digest::MD5;

my $n = @ARGV ? int($ARGV[0]) : 12000;
my $seed = (0x5EED + $n) & 0x7FFFFFFF;
sub rnd {
    # 31-bit LCG; the product stays below 2**62, exact in a 64-bit integer.
    $seed = ($seed * 1103515245 + 12345) & 0x7FFFFFFF;
    return $seed >> 8;
}

my @methods = qw(GET POST PUT DELETE PATCH);
my @words = qw(alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu);
my $md5 = Digest::MD5->new;
my (%by_host, %by_status, %paths_of, %sessions, @queue);
my ($parsed, $created, $removed, $updated, $reports, $bytes_total) = (0, 0, 0, 0, 0, 0);
my $period = 4000; # one grow-and-shrink wave of the session table
my $line_re = qr{^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) (host\d{3}) (GET|POST|PUT|DELETE|PATCH) (/\S+?)\?user=(\w+)&q=(\S*) status=(\d{3}) bytes=(\d+)$};

for my $i (1 .. $n) {
    my $r = rnd();
    my $host = sprintf("host%03d", $r % 97);
    my $method = $methods[$r % 5];
    my $user = "u" . (rnd() % 3000);
    my $depth = 1 + $r % 4;
    my $path = "/" . join("/", map { $words[($r >> $_) % 12] } 1 .. $depth) . "/" . ($r % 10007);
    my $q = join("+", map { $words[(rnd()) % 12] } 0 .. ($r % 3));
    my $status = (200, 200, 200, 201, 204, 301, 404, 500)[$r % 8];
    my $bytes = rnd() % 100000;
    my $line = sprintf("2024-%02d-%02d %02d:%02d:%02d %s %s %s?user=%s&q=%s status=%d bytes=%d",
        1 + $i % 12, 1 + $i % 28, $i % 24, $i % 60, ($i * 7) % 60, $host, $method, $path, $user, $q, $status, $bytes);
    $md5->add($line, "\n");

    my @f = $line =~ $line_re or die "line $i does not parse: $line\n";
    if ($f[6] ne $host || $f[7] ne $method || $f[8] ne $path || $f[9] ne $user || $f[10] ne $q
        || $f[11] != $status || $f[12] != $bytes) {
        print STDERR "line $i parsed back wrong: $line\n";
        exit 1;
    }
    $parsed++;
    $by_host{$f[6]}++;
    $by_status{$f[11]}++;
    $bytes_total += $f[12];

    # String operations that make new strings.
    my @parts = split m{/}, $f[8];
    my $shout = uc(join("-", reverse @parts));
    (my $squeezed = lc $shout) =~ tr/aeiou//d;
    (my $spaced = $f[10]) =~ s/\+/ /g;
    my $tag = substr($squeezed . "________", 0, 8) . ":" . length($spaced);
    $md5->add($tag);

    # A hash of arrays: paths per user, trimmed from the front with splice.
    my $list = ($paths_of{$f[9]} ||= []);
    push @$list, $f[8];
    splice(@$list, 0, 8) if @$list > 24;

    # The session table: grows in one half of a wave, shrinks in the other.
    my $growing = int(($i - 1) / ($period / 2)) % 2 == 0;
    my $key = "s" . ($r % 20011);
    if ($r % 1024 < ($growing ? 700 : 200)) {
        if (exists $sessions{$key}) {
            my $s = $sessions{$key};
            $s->{hits}++;
            $s->{last} = $line;
            push @{ $s->{trail} }, $f[11];
            shift @{ $s->{trail} } if @{ $s->{trail} } > 16;
            $updated++;
        } else {
            $sessions{$key} = { user => $f[9], hits => 1, last => $line, trail => [$f[11]] };
            $created++;
        }
    } elsif (exists $sessions{$key}) {
        delete $sessions{$key};
        $removed++;
    }

    push @queue, [$i, $tag];
    shift @queue while @queue > 500;

    if ($i % 2000 == 0) {
        my $report = join(";", map { "$_=$sessions{$_}{hits}/" . scalar(@{ $sessions{$_}{trail} }) } sort keys %sessions);
        $md5->add($report);
        $reports++;
    }
}

if (keys(%sessions) != $created - $removed) {
    print STDERR "session count ", scalar(keys %sessions), " != created - removed ", $created - $removed, "\n";
    exit 1;
}
my $users = 0;
for my $u (sort keys %paths_of) {
    $md5->add($u, "=", join(",", @{ $paths_of{$u} }), "\n");
    $users++;
}
$md5->add(join(",", map { "$_:$by_host{$_}" } sort keys %by_host));
$md5->add(join(",", map { "$_:$by_status{$_}" } sort { $a <=> $b } keys %by_status));
print "lines $n parsed $parsed hosts ", scalar(keys %by_host), " statuses ", scalar(keys %by_status), " users $users\n";
print "sessions ", scalar(keys %sessions), " created $created updated $updated removed $removed reports $reports\n";
print "bytes $bytes_total md5 ", $md5->hexdigest, "\n";
exit 0;
