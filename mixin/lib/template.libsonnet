// Fills the generated rules template (cachewatch-rules.template.json) with a
// _config: every ${key} or ${key:format} placeholder becomes the _config
// value of key, camelCased, written as `cachewatch alerts` writes it.
local camel(key) =
  local parts = std.split(key, '_');
  parts[0] + std.join('', [std.asciiUpper(p[0]) + p[1:] for p in parts[1:] if p != '']);

// A number as Go's strconv.FormatFloat(x, 'g', -1, 64) writes it: the
// shortest digits that read back as x, exponent form below 1e-4 and from 1e6.
local num(x) =
  if x == 0 then '0'
  else if x < 0 then '-' + num(-x)
  else
    local candidates = [std.format('%.' + p + 'e', x) for p in std.range(0, 16)];
    local exact = [s for s in candidates if std.parseJson(s) == x];
    local sci = if std.length(exact) > 0 then exact[0] else candidates[16];
    // std.format's %e may write 1000 as 10e+02: read the digits and where
    // the decimal point falls, then write them as Go does.
    local mantissa = std.split(sci, 'e')[0];
    local intLen = std.length(std.split(mantissa, '.')[0]);
    local all = std.strReplace(mantissa, '.', '');
    local lead = std.length(all) - std.length(std.lstripChars(all, '0'));
    local digits = std.rstripChars(std.lstripChars(all, '0'), '0');
    local n = std.length(digits);
    local exp = std.parseInt(std.strReplace(std.split(sci, 'e')[1], '+', '')) + intLen - lead - 1;
    if exp < -4 || exp >= 6 then
      local e = std.abs(exp);
      digits[0] + (if n > 1 then '.' + digits[1:] else '') +
      'e' + (if exp < 0 then '-' else '+') + (if e < 10 then '0' else '') + e
    else if exp < 0 then
      '0.' + std.join('', std.repeat(['0'], -exp - 1)) + digits
    else if n <= exp + 1 then
      digits + std.join('', std.repeat(['0'], exp + 1 - n))
    else
      digits[:exp + 1] + '.' + digits[exp + 1:];

local units = { y: 31536000000, w: 604800000, d: 86400000, h: 3600000, m: 60000, s: 1000, ms: 1 };

// A Prometheus duration ("1h30m", "50ms") in milliseconds.
local durationMs(key, s) =
  local bad() = error 'cachewatch mixin: _config.%s: %s is not a duration like 90s or 5m' % [camel(key), std.toString(s)];
  local piece(acc) =
    if acc.num == '' || !std.objectHas(units, acc.unit) then bad()
    else std.parseInt(acc.num) * units[acc.unit];
  local step(acc, c) =
    if std.member('0123456789', c) then
      if acc.unit != '' then acc { ms: acc.ms + piece(acc), num: c, unit: '' } else acc { num: acc.num + c }
    else acc { unit: acc.unit + c };
  if !std.isString(s) || s == '' then bad()
  else
    local last = std.foldl(step, std.stringChars(s), { ms: 0, num: '', unit: '' });
    local ms = last.ms + piece(last);
    if ms <= 0 then error 'cachewatch mixin: _config.%s: must be a positive duration' % camel(key) else ms;

// Milliseconds as Prometheus writes a duration: 90000 → 1m30s.
local formatDuration(total) =
  local step(acc, u) =
    local mult = units[u[0]];
    local n = std.floor(acc.ms / mult);
    if (u[1] && acc.ms % mult != 0) || n == 0 then acc
    else acc { out: acc.out + std.toString(n) + u[0], ms: acc.ms - n * mult };
  local units_ = [['y', true], ['w', true], ['d', false], ['h', false], ['m', false], ['s', false], ['ms', false]];
  if total == 0 then '0s' else std.foldl(step, units_, { ms: total, out: '' }).out;

local render(key, format, kind, v) =
  if kind == 'duration' then
    local ms = durationMs(key, v);
    if format == 'seconds' then num(ms / 1000) else formatDuration(ms)
  else if kind == 'ratio' || kind == 'number' then
    if !std.isNumber(v) || v < 0 then error 'cachewatch mixin: _config.%s: %s is not a non-negative number' % [camel(key), std.toString(v)]
    else if kind == 'ratio' && v > 1 then error 'cachewatch mixin: _config.%s: is a ratio from 0 to 1, got %s' % [camel(key), std.toString(v)]
    else if format == 'pct' then num(v * 100) + '%'
    else num(v)
  else if !std.isString(v) || v == '' then error 'cachewatch mixin: _config.%s: must be a non-empty string' % camel(key)
  else v;

local fillString(s, config, kinds) =
  local parts = std.split(s, '${');
  parts[0] + std.join('', [
    local close = std.findSubstr('}', p)[0];
    local spec = std.split(p[:close], ':');
    local key = spec[0];
    local value =
      if !std.objectHasAll(config, camel(key)) then error 'cachewatch mixin: _config lacks %s' % camel(key)
      else config[camel(key)];
    render(key, if std.length(spec) > 1 then spec[1] else '', kinds[key].kind, value) + p[close + 1:]
    for p in parts[1:]
  ]);

local fill(v, config, kinds) =
  if std.isString(v) then fillString(v, config, kinds)
  else if std.isArray(v) then [fill(e, config, kinds) for e in v]
  else if std.isObject(v) then { [k]: fill(v[k], config, kinds) for k in std.objectFields(v) }
  else v;

{
  // groups returns the template's rule groups for config (a mixin _config).
  groups(template, config):: fill(template.groups, config, template.config),
  num:: num,
  camel:: camel,
}
