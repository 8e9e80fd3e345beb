{{/* The chart's name, or nameOverride. */}}
{{- define "cachewatch-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the release name, with the chart's unless it holds it. */}}
{{- define "cachewatch-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "cachewatch-exporter.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "cachewatch-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cachewatch-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cachewatch-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "cachewatch-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cachewatch
{{- end -}}

{{- define "cachewatch-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cachewatch-exporter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "cachewatch-exporter.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The path of the web config file, when there is one. */}}
{{- define "cachewatch-exporter.webConfigFile" -}}
{{- if .Values.web.configSecret -}}
/etc/cachewatch/web/config/{{ .Values.web.configSecretKey }}
{{- else if .Values.web.tls.enabled -}}
/etc/cachewatch/web/config/web-config.yml
{{- end -}}
{{- end -}}

{{/*
The exporter's arguments: one flag per value (the table below), then
extraArgs. Every flag of `cachewatch exporter` has a value here or in the
chart's own wiring (password, CA and web config files, the listen port, the
targets file); a test fails on a flag that has neither.
*/}}
{{- define "cachewatch-exporter.args" -}}
{{- $v := .Values -}}
{{- $r := $v.redis -}}
{{- $flags := list
  (list "log.level" $v.log.level)
  (list "log.format" $v.log.format)
  (list "web.listen-address" (printf ":%v" (include "cachewatch-exporter.scalar" $v.web.port)))
  (list "web.telemetry-path" $v.web.telemetryPath)
  (list "web.config.file" (include "cachewatch-exporter.webConfigFile" .))
  (list "sample.interval" $v.sample.interval)
  (list "sample.max-keys" $v.sample.maxKeys)
  (list "sample.max-duration" $v.sample.maxDuration)
  (list "sample.scan-count" $v.sample.scanCount)
  (list "sample.batch" $v.sample.batch)
  (list "sample.keys-per-second" $v.sample.keysPerSecond)
  (list "sample.max-reply-bytes" $v.sample.maxReplyBytes)
  (list "locks.pattern" $v.locks.patterns)
  (list "locks.long-held" $v.locks.longHeld)
  (list "locks.notifications" $v.locks.notifications)
  (list "locks.reconcile" $v.locks.reconcile)
  (list "locks.scan-budget" $v.locks.scanBudget)
  (list "locks.max-tracked" $v.locks.maxTracked)
  (list "locks.holders" $v.locks.holders)
  (list "locks.max-groups" $v.locks.maxGroups)
  (list "queue" $v.queues)
  (list "queue.max-reply-bytes" $v.queue.maxReplyBytes)
  (list "keys.memory-sample" $v.keys.memorySample)
  (list "keygroup.rule" $v.keygroup.rules)
  (list "keygroup.max-groups" $v.keygroup.maxGroups)
  (list "keygroup.min-keys" $v.keygroup.minKeys)
  (list "server.miss-burst" $v.server.missBurst)
  (list "server.max-info-bytes" $v.server.maxInfoBytes)
  (list "probe.idle-timeout" $v.probe.idleTimeout)
  (list "probe.max-targets" $v.probe.maxTargets)
-}}
{{- if $v.probe.enabled -}}
{{- $flags = append $flags (list "probe.modules-file" "/etc/cachewatch/probe/modules.yml") -}}
{{- else if $v.targets -}}
{{- $flags = append $flags (list "targets.file" "/etc/cachewatch/targets/targets.yml") -}}
{{- else -}}
{{- $flags = concat $flags (list
  (list "redis.url" $r.url)
  (list "redis.addr" $r.addrs)
  (list "redis.mode" $r.mode)
  (list "redis.user" $r.user)
  (list "redis.password-file" (ternary "/etc/cachewatch/redis/password" "" (not (empty $r.existingSecret))))
  (list "redis.tls" $r.tls.enabled)
  (list "redis.tls-ca-file" (ternary (printf "/etc/cachewatch/redis-tls/%s" $r.tls.caSecretKey) "" (not (empty $r.tls.caSecret))))
  (list "redis.tls-server-name" $r.tls.serverName)
  (list "redis.tls-insecure-skip-verify" $r.tls.insecureSkipVerify)) -}}
{{- end -}}
- exporter
{{- range $flags }}{{ include "cachewatch-exporter.flag" . }}{{ end }}
{{- range $v.extraArgs }}
- {{ toJson . }}
{{- end }}
{{- end -}}

{{/*
One flag from its value, as lines of the args list: nothing for an unset
value (null, "", false, an empty list), the bare flag for true, the flag
once per item of a list, else --flag=value. Argument: list "flag" value.
*/}}
{{- define "cachewatch-exporter.flag" -}}
{{- $name := index . 0 -}}
{{- $value := index . 1 -}}
{{- if kindIs "bool" $value -}}
{{- if $value }}{{ printf "\n- %s" (printf "--%s" $name | toJson) }}{{ end -}}
{{- else if kindIs "slice" $value -}}
{{- range $value }}{{ printf "\n- %s" (printf "--%s=%s" $name (include "cachewatch-exporter.scalar" .) | toJson) }}{{ end -}}
{{- else if and (not (kindIs "invalid" $value)) (ne (toString $value) "") -}}
{{- printf "\n- %s" (printf "--%s=%s" $name (include "cachewatch-exporter.scalar" $value) | toJson) -}}
{{- end -}}
{{- end -}}

{{/* A value as a flag takes it: a whole number read from YAML (a float) without an exponent. */}}
{{- define "cachewatch-exporter.scalar" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{/*
A Prometheus duration ("1h30m", "50ms") in milliseconds; fails naming the
key on anything else. Argument: dict "key" "value".
*/}}
{{- define "cachewatch-exporter.durationMs" -}}
{{- $v := toString .value -}}
{{- if or (eq $v "") (not (regexMatch "^([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?$" $v)) -}}
{{- fail (printf "prometheusRule.config.%s: %q is not a duration like 90s or 5m" .key $v) -}}
{{- end -}}
{{- $unit := dict "y" 31536000000 "w" 604800000 "d" 86400000 "h" 3600000 "m" 60000 "s" 1000 "ms" 1 -}}
{{- $ms := 0 -}}
{{- range regexFindAll "[0-9]+(ms|[ywdhms])" $v -1 -}}
{{- $ms = add $ms (mul (regexFind "^[0-9]+" . | int64) (get $unit (regexReplaceAll "^[0-9]+" . "") | int64)) -}}
{{- end -}}
{{- if le (int64 $ms) 0 -}}
{{- fail (printf "prometheusRule.config.%s: must be a positive duration" .key) -}}
{{- end -}}
{{- $ms -}}
{{- end -}}

{{/* Milliseconds as Prometheus writes a duration: 90000 → 1m30s. */}}
{{- define "cachewatch-exporter.formatDuration" -}}
{{- $ms := int64 . -}}
{{- $out := "" -}}
{{- range $u := list (list "y" 31536000000 true) (list "w" 604800000 true) (list "d" 86400000 false) (list "h" 3600000 false) (list "m" 60000 false) (list "s" 1000 false) (list "ms" 1 false) -}}
{{- $mult := index $u 1 | int64 -}}
{{- if or (not (index $u 2)) (eq (mod $ms $mult) 0) -}}
{{- $n := div $ms $mult -}}
{{- if gt $n 0 -}}
{{- $out = printf "%s%d%s" $out $n (index $u 0) -}}
{{- $ms = sub $ms (mul $n $mult) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $out -}}
{{- end -}}

{{/*
The rule groups: the generated template with every placeholder replaced by
the value of prometheusRule.config in the placeholder's format. Unknown keys
and bad values fail the install, naming the key.
*/}}
{{- define "cachewatch-exporter.ruleGroups" -}}
{{- $raw := .Files.Get "files/cachewatch-rules.template.json" -}}
{{- $tmpl := $raw | fromJson -}}
{{- $cfg := .Values.prometheusRule.config | default dict -}}
{{- range $key, $_ := $cfg -}}
{{- if not (hasKey $tmpl.config $key) -}}
{{- fail (printf "prometheusRule.config.%s: unknown key (the keys are those of `cachewatch alerts --config`)" $key) -}}
{{- end -}}
{{- end -}}
{{- range $key, $spec := $tmpl.config -}}
{{- $v := $spec.default -}}
{{- if hasKey $cfg $key -}}{{- $v = get $cfg $key -}}{{- end -}}
{{- if eq $spec.kind "duration" -}}
{{- $ms := include "cachewatch-exporter.durationMs" (dict "key" $key "value" $v) | int64 -}}
{{- $raw = $raw | replace (printf "${%s:seconds}" $key) (divf $ms 1000 | toString) -}}
{{- $raw = $raw | replace (printf "${%s:duration}" $key) (include "cachewatch-exporter.formatDuration" $ms) -}}
{{- else if or (eq $spec.kind "ratio") (eq $spec.kind "number") -}}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$" (toString $v)) -}}
{{- fail (printf "prometheusRule.config.%s: %v is not a non-negative number" $key $v) -}}
{{- end -}}
{{- $x := float64 $v -}}
{{- if and (eq $spec.kind "ratio") (gt $x 1.0) -}}
{{- fail (printf "prometheusRule.config.%s: is a ratio from 0 to 1, got %v" $key $v) -}}
{{- end -}}
{{- $raw = $raw | replace (printf "${%s:num}" $key) (toString $x) -}}
{{- $raw = $raw | replace (printf "${%s:pct}" $key) (printf "%s%%" (mulf $x 100 | toString)) -}}
{{- else -}}
{{- if eq (toString $v) "" -}}
{{- fail (printf "prometheusRule.config.%s: must not be empty" $key) -}}
{{- end -}}
{{- if and (eq $spec.kind "selector") (not (regexMatch "^\\s*[a-zA-Z_][a-zA-Z0-9_]*\\s*(=|!=|=~|!~)\\s*\"" (toString $v))) -}}
{{- fail (printf "prometheusRule.config.%s: %q is not a list of label matchers like job=~\"api|worker\"" $key $v) -}}
{{- end -}}
{{- $raw = $raw | replace (printf "${%s}" $key) (toJson (toString $v) | trimPrefix "\"" | trimSuffix "\"") -}}
{{- end -}}
{{- end -}}
{{- toYaml (get ($raw | fromJson) "groups") -}}
{{- end -}}

{{/*
The targets file from .Values.targets: each entry's fields under the file's
names, its password and CA as the paths where their Secrets are mounted.
*/}}
{{- define "cachewatch-exporter.targetsFile" -}}
{{- $fields := dict "name" "name" "url" "url" "addrs" "addrs" "user" "user" "mode" "mode" "tls" "tls"
  "tlsServerName" "tls_server_name" "tlsInsecureSkipVerify" "tls_insecure_skip_verify"
  "queues" "queues" "lockPatterns" "lock_patterns" "keysPerSecond" "keys_per_second" -}}
{{- $out := list -}}
{{- range $i, $t := .Values.targets -}}
{{- $e := dict -}}
{{- range $from, $to := $fields -}}
{{- if hasKey $t $from }}{{ $_ := set $e $to (get $t $from) }}{{ end -}}
{{- end -}}
{{- if $t.existingSecret }}{{ $_ := set $e "password_file" (printf "/etc/cachewatch/targets/%d/password/password" $i) }}{{ end -}}
{{- if $t.caSecret }}{{ $_ := set $e "tls_ca_file" (printf "/etc/cachewatch/targets/%d/tls/%s" $i ($t.caSecretKey | default "ca.crt")) }}{{ end -}}
{{- $out = append $out $e -}}
{{- end -}}
{{- toYaml (dict "targets" $out) -}}
{{- end -}}

{{/*
The probe modules file from .Values.probe.modules: each module's fields under
the file's names, its password and CA as the paths where their Secrets are
mounted.
*/}}
{{- define "cachewatch-exporter.modulesFile" -}}
{{- $fields := dict "username" "username" "mode" "mode" "tls" "tls" "tlsServerName" "tls_server_name"
  "tlsInsecureSkipVerify" "tls_insecure_skip_verify" "queues" "queues" "lockPatterns" "lock_patterns"
  "interval" "interval" "keysPerSecond" "keys_per_second" -}}
{{- $out := dict -}}
{{- range $name, $m := .Values.probe.modules -}}
{{- $e := dict -}}
{{- range $from, $to := $fields -}}
{{- if hasKey ($m | default dict) $from }}{{ $_ := set $e $to (get $m $from) }}{{ end -}}
{{- end -}}
{{- if ($m | default dict).existingSecret }}{{ $_ := set $e "password_file" (printf "/etc/cachewatch/probe/%s/password/password" $name) }}{{ end -}}
{{- if ($m | default dict).caSecret }}{{ $_ := set $e "tls_ca_file" (printf "/etc/cachewatch/probe/%s/tls/%s" $name ($m.caSecretKey | default "ca.crt")) }}{{ end -}}
{{- $_ := set $out $name $e -}}
{{- end -}}
{{- toYaml (dict "modules" $out) -}}
{{- end -}}

{{/* The headless Service naming each probe replica. */}}
{{- define "cachewatch-exporter.shardsService" -}}
{{- printf "%s-shards" (include "cachewatch-exporter.fullname" . | trunc 56 | trimSuffix "-") -}}
{{- end -}}
