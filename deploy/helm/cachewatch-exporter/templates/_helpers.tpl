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

{{/* The exporter's arguments, from the values. */}}
{{- define "cachewatch-exporter.args" -}}
- exporter
{{- with .Values.redis.url }}
- --redis.url={{ . }}
{{- end }}
{{- range .Values.redis.addrs }}
- --redis.addr={{ . }}
{{- end }}
- --redis.mode={{ .Values.redis.mode }}
{{- with .Values.redis.user }}
- --redis.user={{ . }}
{{- end }}
{{- if .Values.redis.existingSecret }}
- --redis.password-file=/etc/cachewatch/redis/password
{{- end }}
{{- if .Values.redis.tls.enabled }}
- --redis.tls
{{- end }}
{{- if .Values.redis.tls.caSecret }}
- --redis.tls-ca-file=/etc/cachewatch/redis-tls/{{ .Values.redis.tls.caSecretKey }}
{{- end }}
{{- with .Values.redis.tls.serverName }}
- --redis.tls-server-name={{ . }}
{{- end }}
{{- if .Values.redis.tls.insecureSkipVerify }}
- --redis.tls-insecure-skip-verify
{{- end }}
- --web.listen-address=:{{ .Values.web.port }}
- --web.telemetry-path={{ .Values.web.telemetryPath }}
{{- with include "cachewatch-exporter.webConfigFile" . }}
- --web.config.file={{ . }}
{{- end }}
- --sample.interval={{ .Values.sample.interval }}
- --sample.max-keys={{ int64 .Values.sample.maxKeys }}
- --sample.max-duration={{ .Values.sample.maxDuration }}
- --sample.scan-count={{ int64 .Values.sample.scanCount }}
- --sample.batch={{ int64 .Values.sample.batch }}
- --sample.keys-per-second={{ .Values.sample.keysPerSecond }}
{{- range .Values.locks.patterns }}
- --locks.pattern={{ . }}
{{- end }}
- --locks.long-held={{ .Values.locks.longHeld }}
{{- range .Values.queues }}
- --queue={{ . }}
{{- end }}
{{- range .Values.keygroup.rules }}
- --keygroup.rule={{ . }}
{{- end }}
- --keygroup.max-groups={{ int64 .Values.keygroup.maxGroups }}
- --server.miss-burst={{ int64 .Values.server.missBurst }}
- --log.level={{ .Values.log.level }}
- --log.format={{ .Values.log.format }}
{{- range .Values.extraArgs }}
- {{ . }}
{{- end }}
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
