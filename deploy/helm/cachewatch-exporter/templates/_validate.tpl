{{/*
Checks that fail the install before anything is rendered: the Redis to
sample must be named, and no secret may be a value (it would be stored in
the Deployment, readable by anyone who can read it). Messages name the value
and never repeat what it holds.
*/}}
{{- define "cachewatch-exporter.validate" -}}
{{- $r := .Values.redis -}}
{{- if hasKey $r "password" -}}
{{- fail "redis.password is not a value: a password in values is stored in the release; put it in a Secret and set redis.existingSecret (and redis.existingSecretPasswordKey)" -}}
{{- end -}}
{{- if .Values.probe.enabled -}}
{{- if or .Values.targets $r.url $r.addrs $r.user $r.existingSecret $r.tls.enabled $r.tls.caSecret $r.tls.serverName $r.tls.insecureSkipVerify (ne $r.mode "auto") -}}
{{- fail "probe.enabled and targets or redis.*: a probing exporter samples only the targets Prometheus names (credentials in probe.modules)" -}}
{{- end -}}
{{- if and .Values.probe.targets (not (hasKey .Values.probe.modules .Values.probe.module)) -}}
{{- fail (printf "probe.module %s is not one of probe.modules" .Values.probe.module) -}}
{{- end -}}
{{- else if .Values.targets -}}
{{- if or $r.url $r.addrs $r.user $r.existingSecret $r.tls.enabled $r.tls.caSecret $r.tls.serverName $r.tls.insecureSkipVerify (ne $r.mode "auto") -}}
{{- fail "targets and redis.url/redis.addrs/redis.mode/redis.user/redis.existingSecret/redis.tls.*: set the connection in one place (each target has its own)" -}}
{{- end -}}
{{- else if and $r.url $r.addrs -}}
{{- fail "redis.url and redis.addrs: set one, not both" -}}
{{- else if not (or $r.url $r.addrs) -}}
{{- required "redis.url (or redis.addrs, or targets) is required: the Redis the exporter samples" "" -}}
{{- end -}}
{{- include "cachewatch-exporter.refuseSecretURL" (dict "name" "redis.url" "url" $r.url "secret" "redis.existingSecret") -}}
{{- $names := dict -}}
{{- range $i, $t := .Values.targets -}}
{{- include "cachewatch-exporter.refuseSecretURL" (dict "name" (printf "targets[%d].url" $i) "url" $t.url "secret" (printf "targets[%d].existingSecret" $i)) -}}
{{- if eq (empty $t.url) (empty $t.addrs) -}}
{{- fail (printf "targets[%d] (%s): set one of url and addrs" $i $t.name) -}}
{{- end -}}
{{- if hasKey $names $t.name -}}
{{- fail (printf "targets[%d]: name %s is used twice" $i $t.name) -}}
{{- end -}}
{{- $_ := set $names $t.name true -}}
{{- end -}}
{{- range $i, $arg := .Values.extraArgs -}}
{{- $flag := regexReplaceAll "=.*$" (toString $arg) "" -}}
{{- if and (regexMatch "(?i)pass|secret|token|auth|credential|api[-_]?key" $flag) (ne $flag "--redis.password-file") -}}
{{- fail (printf "extraArgs[%d] (%s): a secret in the exporter's arguments is stored in the Deployment and shown by ps; put it in a Secret and set redis.existingSecret, or web.configSecret" $i $flag) -}}
{{- end -}}
{{- include "cachewatch-exporter.refuseSecretURL" (dict "name" (printf "extraArgs[%d]" $i) "url" (toString $arg) "secret" "redis.existingSecret") -}}
{{- end -}}
{{- end -}}

{{/*
Fails when a URL (or any text holding one) carries a password: in its user
information (redis://user:password@host, redis://:password@host) or as a
password or auth query parameter. Argument: dict "name" "url" "secret",
secret naming the value that references a Secret instead.
*/}}
{{- define "cachewatch-exporter.refuseSecretURL" -}}
{{- $url := toString (.url | default "") -}}
{{- if regexMatch "[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#@]*:[^/?#@]*@" $url -}}
{{- fail (printf "%s: a password in the URL is refused (it would be stored in the Deployment); put it in a Secret and set %s, and leave only the user in the URL" .name .secret) -}}
{{- end -}}
{{- if regexMatch "(?i)[?&]([^=&#]*pass[^=&#]*|auth)(=|&|#|$)" $url -}}
{{- fail (printf "%s: a password parameter in the URL is refused (it would be stored in the Deployment); put the password in a Secret and set %s" .name .secret) -}}
{{- end -}}
{{- end -}}
